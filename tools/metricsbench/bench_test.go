package metricsbench

import (
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// buckets are the broker's latency buckets (10 µs to 30 s).
var buckets = []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01,
	.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// latencies cycles through values spread over the buckets, so the bucket search is not always
// the same branch.
var latencies = func() []float64 {
	v := make([]float64, 64)
	for i := range v {
		v[i] = 5e-6 * float64(int(1)<<(i%20)) // 5 µs .. 2.6 s
	}
	return v
}()

// batchCount is a typical record count of one produce batch.
const batchCount = 128

func promCounter(b *testing.B) prometheus.Counter {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_messages_in_total", Help: "h"}, []string{"topic", "partition"})
	prometheus.NewRegistry().MustRegister(vec)
	return vec.WithLabelValues("events", "3")
}

func promHistogram() prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bench_seconds", Help: "h", Buckets: buckets})
	prometheus.NewRegistry().MustRegister(h)
	return h
}

func vmHistogram() *vm.PrometheusHistogram {
	return vm.NewSet().NewPrometheusHistogramExt("bench_seconds", buckets)
}

// BenchmarkCounterAdd: one counter add per batch on a series resolved beforehand (at topic
// creation), against a plain atomic add (what a scrape-time collector reads).
func BenchmarkCounterAdd(b *testing.B) {
	b.Run("atomic", func(b *testing.B) {
		var c atomic.Uint64
		b.ReportAllocs()
		for b.Loop() {
			c.Add(batchCount)
		}
	})
	b.Run("prometheus", func(b *testing.B) {
		c := promCounter(b)
		b.ReportAllocs()
		for b.Loop() {
			c.Add(batchCount)
		}
	})
	b.Run("victoriametrics", func(b *testing.B) {
		c := vm.NewSet().NewCounter(`bench_messages_in_total{topic="events",partition="3"}`)
		b.ReportAllocs()
		for b.Loop() {
			c.Add(batchCount)
		}
	})
}

// BenchmarkCounterAddLookup: the same add when the series is looked up by its labels every
// batch, which is why the broker resolves its series when a topic is created.
func BenchmarkCounterAddLookup(b *testing.B) {
	b.Run("prometheus", func(b *testing.B) {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_messages_in_total", Help: "h"}, []string{"topic", "partition"})
		b.ReportAllocs()
		for b.Loop() {
			vec.WithLabelValues("events", "3").Add(batchCount)
		}
	})
	b.Run("victoriametrics", func(b *testing.B) {
		s := vm.NewSet()
		b.ReportAllocs()
		for b.Loop() {
			s.GetOrCreateCounter(`bench_messages_in_total{topic="events",partition="3"}`).Add(batchCount)
		}
	})
}

// BenchmarkHistogramObserve: one latency observation per batch, one goroutine.
func BenchmarkHistogramObserve(b *testing.B) {
	b.Run("prometheus", func(b *testing.B) {
		h := promHistogram()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			h.Observe(latencies[i&63])
			i++
		}
	})
	b.Run("victoriametrics", func(b *testing.B) {
		h := vmHistogram()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			h.Update(latencies[i&63])
			i++
		}
	})
}

// BenchmarkHistogramObserveParallel: every event loop observes into the same histogram (the
// broker's histograms are not per connection), GOMAXPROCS goroutines at once.
func BenchmarkHistogramObserveParallel(b *testing.B) {
	b.Run("prometheus", func(b *testing.B) {
		h := promHistogram()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				h.Observe(latencies[i&63])
				i++
			}
		})
	})
	b.Run("victoriametrics", func(b *testing.B) {
		h := vmHistogram()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				h.Update(latencies[i&63])
				i++
			}
		})
	})
}

// BenchmarkProduceBatch is what one produced batch costs the broker's loop with each library:
// messages and bytes counted on the partition's series, and the produce-to-ack time (from a
// clock read the loop makes anyway) observed. "atomic" counts with plain atomics read at
// scrape time and observes nothing: the floor.
func BenchmarkProduceBatch(b *testing.B) {
	start := time.Now()
	b.Run("atomic", func(b *testing.B) {
		var msgs, bytes atomic.Uint64
		b.ReportAllocs()
		for b.Loop() {
			msgs.Add(batchCount)
			bytes.Add(batchCount * 100)
		}
	})
	b.Run("prometheus", func(b *testing.B) {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_total", Help: "h"}, []string{"topic", "partition", "dir"})
		msgs, bytes := vec.WithLabelValues("events", "3", "m"), vec.WithLabelValues("events", "3", "b")
		h := promHistogram()
		b.ReportAllocs()
		for b.Loop() {
			msgs.Add(batchCount)
			bytes.Add(batchCount * 100)
			h.Observe(time.Since(start).Seconds())
		}
	})
	b.Run("victoriametrics", func(b *testing.B) {
		s := vm.NewSet()
		msgs := s.NewCounter(`bench_messages_total{topic="events",partition="3"}`)
		bytes := s.NewCounter(`bench_bytes_total{topic="events",partition="3"}`)
		h := s.NewPrometheusHistogramExt("bench_seconds", buckets)
		b.ReportAllocs()
		for b.Loop() {
			msgs.Add(batchCount)
			bytes.Add(batchCount * 100)
			h.UpdateDuration(start)
		}
	})
}

// BenchmarkObserveDuringScrape: observations while another goroutine scrapes the histogram
// without pause (a worst case; a real scrape comes every 15 s). A scrape that locks what the
// observer locks shows here.
func BenchmarkObserveDuringScrape(b *testing.B) {
	run := func(b *testing.B, observe func(float64), scrape func()) {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
					scrape()
				}
			}
		}()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			observe(latencies[i&63])
			i++
		}
		b.StopTimer()
		close(stop)
		<-done
	}
	b.Run("prometheus", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bench_seconds", Help: "h", Buckets: buckets})
		reg.MustRegister(h)
		run(b, h.Observe, func() {
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				_, _ = expfmt.MetricFamilyToText(io.Discard, mf)
			}
		})
	})
	b.Run("victoriametrics", func(b *testing.B) {
		s := vm.NewSet()
		h := s.NewPrometheusHistogramExt("bench_seconds", buckets)
		run(b, h.Update, func() { s.WritePrometheus(io.Discard) })
	})
}

// BenchmarkScrape renders what a broker with 256 partitions exposes (6 series each, read from
// atomics at scrape time) plus three histograms: the cost of one /metrics answer.
func BenchmarkScrape(b *testing.B) {
	const parts = 256
	var vals [parts * 6]atomic.Uint64
	names := []string{"lightq_partition_messages_in_total", "lightq_partition_bytes_in_total",
		"lightq_partition_messages_out_total", "lightq_partition_bytes_out_total",
		"lightq_partition_start_offset", "lightq_partition_end_offset"}
	b.Run("prometheus", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		descs := make([]*prometheus.Desc, len(names))
		for i, n := range names {
			descs[i] = prometheus.NewDesc(n, "help text", []string{"topic", "partition"}, nil)
		}
		reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
			for p := 0; p < parts; p++ {
				ps := strconv.Itoa(p)
				for i, d := range descs {
					ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(vals[p*6+i].Load()), "events", ps)
				}
			}
		}))
		for i := 0; i < 3; i++ {
			reg.MustRegister(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bench_seconds_" + strconv.Itoa(i), Help: "h", Buckets: buckets}))
		}
		b.ReportAllocs()
		for b.Loop() {
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				_, _ = expfmt.MetricFamilyToText(io.Discard, mf)
			}
		}
	})
	b.Run("victoriametrics", func(b *testing.B) {
		s := vm.NewSet()
		s.RegisterMetricsWriter(func(w io.Writer) {
			for i, n := range names {
				for p := 0; p < parts; p++ {
					vm.WriteCounterUint64(w, n+`{topic="events",partition="`+strconv.Itoa(p)+`"}`, vals[p*6+i].Load())
				}
			}
		})
		for i := 0; i < 3; i++ {
			s.NewPrometheusHistogramExt("bench_seconds_"+strconv.Itoa(i), buckets)
		}
		b.ReportAllocs()
		for b.Loop() {
			s.WritePrometheus(io.Discard)
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }
