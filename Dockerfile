# oncerun's production command (./cmd/oncerun: no Temporal server, no
# development code) in a small image whose entrypoint is `oncerun worker`, for
# docker-compose.yml or any container platform. The worker reads its
# configuration from the environment (see the README) and stops gracefully on
# SIGTERM. Other commands run with `--entrypoint /usr/local/bin/oncerun`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/oncerun ./cmd/oncerun

FROM alpine:3.23
# uid 1000: a file mounted into the container (a tokens file, TLS keys) must
# be readable by it, and a tokens file owned by it or by root.
RUN adduser -D -H -u 1000 oncerun
COPY --from=build /out/oncerun /usr/local/bin/
USER oncerun
# /healthz and /metrics on every interface of the container.
ENV METRICS_ADDR=0.0.0.0:9464
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/oncerun", "worker"]
