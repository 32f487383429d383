package oncerun_test

import (
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/packages"
)

// publicPackages are the packages a deployment imports to build on oncerun.
var publicPackages = []string{
	"github.com/oncerun/oncerun/activities",
	"github.com/oncerun/oncerun/approvals",
	"github.com/oncerun/oncerun/approvals/inbox",
	"github.com/oncerun/oncerun/migrations",
	"github.com/oncerun/oncerun/starter/oncerun",
	"github.com/oncerun/oncerun/starter/oncerundev",
	"github.com/oncerun/oncerun/tools",
	"github.com/oncerun/oncerun/worker",
	"github.com/oncerun/oncerun/workflows",
}

// TestPublicAPINamesOnlyPublicTypes checks that every type a user of the
// public packages must name is nameable from outside the module: no
// exported function, method, field, variable or constant spells a type of
// an internal package, except through a public alias (type X = internal.T).
func TestPublicAPINamesOnlyPublicTypes(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedTypes | packages.NeedName | packages.NeedImports | packages.NeedDeps},
		publicPackages...)
	require.NoError(t, err)
	require.Len(t, pkgs, len(publicPackages))
	var problems []string
	for _, p := range pkgs {
		require.Empty(t, p.Errors, "load %s", p.PkgPath)
		problems = append(problems, internalNames(p.Types)...)
	}
	slices.Sort(problems)
	require.Empty(t, problems, "public API spells internal types; add a public alias and use it:\n%s", strings.Join(problems, "\n"))
}

// internalNames lists where the exported API of pkg spells a named type of
// an internal package.
func internalNames(pkg *types.Package) []string {
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		w := apiWalker{seen: map[types.Type]bool{}, report: func(where string, n *types.Named) {
			out = append(out, pkg.Name()+"."+name+where+": "+n.String())
		}}
		tn, isType := obj.(*types.TypeName)
		switch {
		case isType && tn.IsAlias():
			// An alias is how an internal type is made public.
		case isType:
			w.walk("", tn.Type().Underlying())
			for _, m := range exportedMethods(tn) {
				w.walk("."+m.Name(), m.Type())
			}
		default:
			w.walk("", obj.Type())
		}
	}
	return out
}

type apiWalker struct {
	seen   map[types.Type]bool
	report func(where string, n *types.Named)
}

func (w apiWalker) walk(where string, t types.Type) {
	if w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		// Spelled through an alias: nameable wherever the alias is public.
		if t.Obj().Pkg() != nil && isInternal(t.Obj().Pkg().Path()) {
			w.walk(where, types.Unalias(t))
		}
	case *types.Named:
		if t.Obj().Pkg() != nil && isInternal(t.Obj().Pkg().Path()) {
			w.report(where, t)
		}
		for a := range t.TypeArgs().Types() {
			w.walk(where, a)
		}
	case *types.Pointer:
		w.walk(where, t.Elem())
	case *types.Slice:
		w.walk(where, t.Elem())
	case *types.Array:
		w.walk(where, t.Elem())
	case *types.Chan:
		w.walk(where, t.Elem())
	case *types.Map:
		w.walk(where, t.Key())
		w.walk(where, t.Elem())
	case *types.Signature:
		for v := range t.Params().Variables() {
			w.walk(where, v.Type())
		}
		for v := range t.Results().Variables() {
			w.walk(where, v.Type())
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() {
				w.walk(where+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			if m.Exported() {
				w.walk(where+"."+m.Name(), m.Type())
			}
		}
	}
}

func isInternal(path string) bool {
	return strings.Contains(path+"/", "/internal/")
}

// exportBudget is, per public package, how many identifiers it exports
// (each constant, variable, function and type, and each exported method of
// an exported type; struct fields are not counted). A change that exports
// more raises the package's budget here, on purpose and in review; one
// that exports fewer lowers it, so that the budget stays the surface.
var exportBudget = map[string]int{
	"github.com/oncerun/oncerun/activities":         93,  // RunFact, RecordFactsInput, RecordFacts: a run's event log
	"github.com/oncerun/oncerun/approvals":          143, // the event streams, the runs' list, the OpenAPI document, the watch client
	"github.com/oncerun/oncerun/approvals/inbox":    5,
	"github.com/oncerun/oncerun/migrations":         5,
	"github.com/oncerun/oncerun/starter/oncerun":    4,
	"github.com/oncerun/oncerun/starter/oncerundev": 2,
	"github.com/oncerun/oncerun/tools":              62,
	"github.com/oncerun/oncerun/worker":             44,  // MCPNotices, for oncerun tools
	"github.com/oncerun/oncerun/workflows":          116, // Control.ValidateCancel, for the API and the CLI
}

// exported lists the identifiers pkg exports, as exportBudget counts them.
func exported(pkg *types.Package) []string {
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		out = append(out, name)
		if tn, ok := obj.(*types.TypeName); ok && !tn.IsAlias() {
			for _, m := range exportedMethods(tn) {
				out = append(out, name+"."+m.Name())
			}
		}
	}
	return out
}

// exportedMethods lists the exported methods of the named type tn.
func exportedMethods(tn *types.TypeName) []*types.Func {
	named, ok := tn.Type().(*types.Named)
	if !ok {
		return nil
	}
	var out []*types.Func
	for m := range named.Methods() {
		if m.Exported() {
			out = append(out, m)
		}
	}
	return out
}

// TestPublicAPIStaysWithinItsBudget holds each public package to the count
// of exported identifiers exportBudget gives it.
func TestPublicAPIStaysWithinItsBudget(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedTypes | packages.NeedName}, publicPackages...)
	require.NoError(t, err)
	require.Len(t, pkgs, len(publicPackages))
	for _, p := range pkgs {
		require.Empty(t, p.Errors, "load %s", p.PkgPath)
		names := exported(p.Types)
		budget, ok := exportBudget[p.PkgPath]
		require.True(t, ok, "%s has no budget in exportBudget", p.PkgPath)
		switch {
		case len(names) > budget:
			t.Errorf("%s exports %d identifiers, over its budget of %d: unexport what a deployment does not need, or raise the budget on purpose:\n%s",
				p.PkgPath, len(names), budget, strings.Join(names, "\n"))
		case len(names) < budget:
			t.Errorf("%s exports %d identifiers, under its budget of %d: lower the budget to %d so that it stays the surface",
				p.PkgPath, len(names), budget, len(names))
		}
	}
}
