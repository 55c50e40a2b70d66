// Package metricsbench measures the two metrics libraries LightQ considered,
// github.com/prometheus/client_golang and github.com/VictoriaMetrics/metrics, on the operations
// the broker's produce path needs per batch: a counter add and a histogram observation (see
// docs/DESIGN.md, dependencies). It is its own module so that the broker does not depend on
// the library it did not choose. Run it with `make metricsbench`.
package metricsbench
