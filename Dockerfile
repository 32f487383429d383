# The oncerun CLI, whose `oncerun worker` is the container's entrypoint, for
# docker-compose.yml or any container platform. The worker reads its configuration from the
# environment (see the README) and stops gracefully on SIGTERM.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/oncerun ./starter

FROM alpine:3.20
RUN adduser -D -H oncerun
COPY --from=build /out/oncerun /usr/local/bin/
USER oncerun
# /healthz and /metrics on every interface of the container.
ENV METRICS_ADDR=0.0.0.0:9464
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/oncerun", "worker"]
