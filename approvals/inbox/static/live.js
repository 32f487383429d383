// live.js keeps an inbox page up to date while it is open. It follows the
// events the page's #live element names (data-events): the tenant's at /,
// one run's at /runs/{run_id}. On an event that changes what the page
// shows, it fetches the page again and puts the fresh #live-region in
// place of the old; on a run's page it also shows the text the run's model
// is writing (text.delta) until the model's turn ends. The browser's
// EventSource reconnects by itself after a drop, resuming after the last
// event it had (Last-Event-ID), and the page is fetched again on every
// (re)connection, so that it catches up with whatever it missed.
//
// A card or section the person is working in (focus inside, a field typed
// into, a disclosure opened) is kept as it is while the rest is replaced,
// until the person leaves it untouched; it leaves only when the fresh page
// no longer has it. Without this script the page is as it was rendered.
(function () {
  "use strict";

  var status = document.getElementById("live");
  var region = document.getElementById("live-region");
  if (!status || !region || !window.EventSource || !window.fetch || !window.DOMParser) {
    return;
  }
  var eventsURL = status.getAttribute("data-events");
  var writing = document.getElementById("model-writing");
  var writingText = document.getElementById("model-text");
  var runPage = eventsURL !== "/events";
  var runID = runPage ? decodeURIComponent(eventsURL.split("/")[2] || "") : "";

  // Durable event types of a run's log (docs/events.md). An EventSource
  // hears only the types it listens to, by name.
  var runTypes = [
    "run.started", "run.paused", "run.resumed", "run.completed", "run.failed", "run.cancelled",
    "run.cancelling", "run.pause_requested", "run.resume_requested",
    "message.accepted", "message.read", "turn.started", "turn.ended", "turn.discarded"
  ];
  var stepTypes = [
    "step.proposed", "step.waiting_for_approval", "step.parked_at_limit", "step.approved", "step.running",
    "step.applied", "step.completed", "step.replayed", "step.duplicate", "step.failed", "step.refused",
    "step.rejected", "step.expired", "step.cancelled", "step.needs_resolution", "step.waiting_for_input"
  ];
  var personTypes = [
    "approval.approved", "approval.rejected", "approval.edited",
    "question.asked", "question.answered", "question.expired", "question.cancelled", "question.lost",
    "resolution.applied", "resolution.not_applied"
  ];
  // The events that can change the inbox's lists: a step that starts or
  // stops waiting for a person, a person's decision, a run's end.
  var inboxTypes = personTypes.concat([
    "step.waiting_for_approval", "step.parked_at_limit", "step.approved", "step.running", "step.completed",
    "step.replayed", "step.duplicate", "step.failed", "step.refused", "step.rejected", "step.expired",
    "step.cancelled", "step.needs_resolution", "step.waiting_for_input",
    "run.completed", "run.failed", "run.cancelled", "run.cancelling"
  ]);
  var ends = { "run.completed": true, "run.failed": true, "run.cancelled": true };

  // The indicator.
  var words = {
    connecting: "Connecting for live updates…",
    live: "Live: this page updates itself.",
    reconnecting: "Reconnecting…",
    stopped: "Not live: reload the page to see what changed.",
    ended: "The run has ended: this page is final."
  };
  var drops = 0;
  function show(state) {
    if (status.getAttribute("data-state") === state) {
      return;
    }
    status.setAttribute("data-state", state);
    status.textContent = words[state];
  }
  show("connecting");
  status.hidden = false;

  // The parts the person is working in.
  var touched = new WeakSet();
  var opened = new WeakSet();
  function partOf(node) {
    while (node && node.parentNode !== region) {
      node = node.parentNode;
    }
    return node && node.nodeType === 1 ? node : null;
  }
  function touch(ev) {
    var part = partOf(ev.target);
    if (part) {
      touched.add(part);
    }
  }
  region.addEventListener("focusin", touch);
  region.addEventListener("input", touch);
  region.addEventListener("change", touch);
  region.addEventListener("toggle", function (ev) {
    if (ev.target.open) {
      opened.add(ev.target);
      touch(ev);
    } else {
      opened.delete(ev.target);
    }
  }, true);
  region.addEventListener("focusout", function (ev) {
    var part = partOf(ev.target);
    setTimeout(function () {
      if (part && !part.contains(document.activeElement) && !changed(part)) {
        touched.delete(part);
        if (heldBack) {
          heldBack = false;
          schedule();
        }
      }
    }, 0);
  });
  // changed reports whether the person typed into, chose in or opened
  // something in part.
  function changed(part) {
    var fields = part.querySelectorAll("input, textarea, select, details");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.tagName === "DETAILS") {
        if (opened.has(f)) {
          return true;
        }
      } else if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) {
            return true;
          }
        }
      } else if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) {
          return true;
        }
      } else if (f.type !== "hidden" && f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  // keys names the parts of a region across renders: by id, by run and
  // step, or else by tag and class and the count of such parts before
  // (the n-th timeline of a run's steps).
  function keys(parts) {
    var seen = {};
    return parts.map(function (el) {
      if (el.nodeType !== 1) {
        return "";
      }
      if (el.id) {
        return "#" + el.id;
      }
      var k = el.tagName + "." + el.className;
      if (el.hasAttribute("data-run")) {
        return k + " " + el.getAttribute("data-run") + " " + el.getAttribute("data-step");
      }
      seen[k] = (seen[k] || 0) + 1;
      return k + " " + seen[k];
    });
  }

  // swap puts fresh's parts in the region's place, keeping the touched
  // parts fresh still has where they are; it reports whether it kept one.
  function swap(fresh) {
    var keep = {};
    var olds = Array.prototype.slice.call(region.childNodes);
    keys(olds).forEach(function (k, i) {
      if (k && touched.has(olds[i])) {
        keep[k] = olds[i];
      }
    });
    var parts = Array.prototype.slice.call(fresh.childNodes);
    var wanted = [];
    var inWanted = new Set();
    var held = false;
    keys(parts).forEach(function (k, i) {
      var node = (k && keep[k]) || parts[i];
      held = held || node !== parts[i];
      wanted.push(node);
      inWanted.add(node);
    });
    Array.prototype.slice.call(region.childNodes).forEach(function (n) {
      if (!inWanted.has(n)) {
        region.removeChild(n);
      }
    });
    var at = region.firstChild;
    wanted.forEach(function (n) {
      if (n === at) {
        at = at.nextSibling;
      } else {
        region.insertBefore(n, at);
      }
    });
    return held;
  }

  // refresh fetches the page again and swaps its region in, at most one
  // fetch at a time; the events that come during one ask for another.
  var busy = false;
  var stale = false;
  var timer = 0;
  var lastHTML = region.innerHTML;
  // heldBack is set while a part kept for the person may be out of date.
  var heldBack = false;
  function schedule() {
    stale = true;
    if (!timer) {
      timer = setTimeout(function () {
        timer = 0;
        refresh();
      }, 200);
    }
  }
  function refresh() {
    if (busy) {
      stale = true;
      return;
    }
    busy = true;
    stale = false;
    fetch(location.href, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (res) {
        // A page that failed, or the login page of a session that ended,
        // leaves the page as it is.
        if (!res.ok || res.redirected) {
          return null;
        }
        return res.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live-region");
        if (!fresh || fresh.innerHTML === lastHTML) {
          return;
        }
        lastHTML = fresh.innerHTML;
        if (swap(fresh)) {
          // The next fetch swaps again, the kept parts included.
          heldBack = true;
          lastHTML = null;
        }
      })
      .catch(function () {
        stale = true;
      })
      .then(function () {
        busy = false;
        if (stale) {
          schedule();
        }
      });
  }

  // The text the run's model is writing.
  var lastMessage = "";
  function clearWriting() {
    if (writing) {
      writing.hidden = true;
      writingText.textContent = "";
      lastMessage = "";
    }
  }
  function parse(msg) {
    try {
      return JSON.parse(msg.data);
    } catch (e) {
      return null;
    }
  }

  var source = new EventSource(eventsURL);
  source.addEventListener("open", function () {
    show("live");
    schedule();
  });
  source.addEventListener("error", function () {
    drops++;
    status.setAttribute("data-drops", String(drops));
    show(source.readyState === EventSource.CLOSED ? "stopped" : "reconnecting");
  });
  if (runPage) {
    runTypes.concat(stepTypes, personTypes).forEach(function (type) {
      source.addEventListener(type, function (msg) {
        var e = parse(msg);
        if (type === "turn.ended" || type === "turn.discarded") {
          clearWriting();
        }
        schedule();
        if (ends[type] && e && e.run_id === runID) {
          source.close();
          show("ended");
        }
      });
    });
    source.addEventListener("text.delta", function (msg) {
      var e = parse(msg);
      if (!writing || !e || !e.data || typeof e.data.text !== "string") {
        return;
      }
      var id = String(e.data.message_id || "");
      if (lastMessage && id !== lastMessage && writingText.textContent) {
        writingText.textContent += "\n\n";
      }
      lastMessage = id;
      writingText.textContent += e.data.text;
      writing.hidden = false;
    });
  } else {
    inboxTypes.forEach(function (type) {
      source.addEventListener(type, schedule);
    });
  }
})();
