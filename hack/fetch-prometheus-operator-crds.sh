#!/usr/bin/env bash
# Fetches the CRDs of the Prometheus Operator (example/prometheus-operator-crd/
# of github.com/prometheus-operator/prometheus-operator at
# PROMETHEUS_OPERATOR_VERSION of hack/versions.env) into the tools cache
# (hack/fetch-module-crds.sh). Prints the directory that holds the
# ServiceMonitor, PodMonitor and PrometheusRule CRDs, the kinds the chart
# renders.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
exec "$here/fetch-module-crds.sh" prometheus-operator \
  github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" \
  example/prometheus-operator-crd \
  monitoring.coreos.com_servicemonitors.yaml \
  monitoring.coreos.com_podmonitors.yaml \
  monitoring.coreos.com_prometheusrules.yaml
