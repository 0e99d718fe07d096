# Multi-stage build: a static outbox-cdc binary on a distroless, non-root base.
#   docker build -t outbox-cdc .
#   docker run --rm -v $PWD/outbox-cdc.yaml:/etc/outbox-cdc.yaml -v cdc-state:/var/lib/outbox-cdc outbox-cdc
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/outbox-cdc ./cmd/outbox-cdc \
 && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outbox-cdc /usr/local/bin/outbox-cdc
# The checkpoint lives here by default; mount a volume so it survives restarts.
COPY --from=build --chown=65532:65532 /out/state /var/lib/outbox-cdc
USER 65532:65532
ENV OUTBOX_CDC_CHECKPOINT_PATH=/var/lib/outbox-cdc/outbox-cdc.checkpoint \
    OUTBOX_CDC_HTTP_LISTEN=0.0.0.0:9464
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/outbox-cdc"]
CMD ["run", "--config", "/etc/outbox-cdc.yaml"]
