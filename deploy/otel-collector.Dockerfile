# The OpenTelemetry Collector (contrib) with a shell and wget, for a docker healthcheck.
#
# The official image is distroless (FROM scratch): no shell, no wget/curl, so docker cannot probe
# its health_check extension from inside the container. Its binary is static (Go, CGO off), so it
# is copied as is onto busybox, which has wget. Versions: .env (OTEL_COLLECTOR_IMAGE,
# OTEL_COLLECTOR_BASE_IMAGE).
ARG OTEL_COLLECTOR_IMAGE=otel/opentelemetry-collector-contrib:0.119.0
ARG OTEL_COLLECTOR_BASE_IMAGE=busybox:1.36.1-musl

FROM ${OTEL_COLLECTOR_IMAGE} AS collector

FROM ${OTEL_COLLECTOR_BASE_IMAGE}
COPY --from=collector /otelcol-contrib /otelcol-contrib
COPY --from=collector /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 10001
EXPOSE 4317 4318 13133
ENTRYPOINT ["/otelcol-contrib"]
CMD ["--config=/etc/otelcol/config.yml"]
