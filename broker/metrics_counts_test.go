package broker

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	cpart "github.com/lightq/lightq/cluster/partition"
)

// TestClusterCountSeries: each field of a replica's cpart.Counts is the value of its own
// series (family and label), every label value shown. The fields get distinct values, so a
// field wired to the wrong series, or not at all, fails; cluster/partition's catch-up and
// damage tests check that the fields move.
func TestClusterCountSeries(t *testing.T) {
	var cn cpart.Counts
	n := int64(0)
	fill(reflect.ValueOf(&cn).Elem(), &n)
	want := map[string]int64{
		"lightq_cluster_partition_catchups_started_total":                     cn.CatchUpsStarted,
		"lightq_cluster_partition_catchups_completed_total":                   cn.CatchUpsDone,
		"lightq_cluster_partition_catchups_abandoned_total{reason=stall}":     cn.CatchUpsAbandoned[cpart.AbandonStall],
		"lightq_cluster_partition_catchups_abandoned_total{reason=term}":      cn.CatchUpsAbandoned[cpart.AbandonTerm],
		"lightq_cluster_partition_catchups_abandoned_total{reason=no_answer}": cn.CatchUpsAbandoned[cpart.AbandonNoAnswer],
		"lightq_cluster_partition_catchups_timed_out_total":                   cn.CatchUpsTimedOut,
		"lightq_cluster_partition_segment_bytes_received_total":               cn.SegmentBytesReceived,
		"lightq_cluster_partition_segments_received_total":                    cn.SegmentsReceived,
		"lightq_cluster_partition_segment_bytes_sent_total":                   cn.SegmentBytesSent,
		"lightq_cluster_partition_segments_sent_total":                        cn.SegmentsSent,
		"lightq_cluster_partition_snapshots_sent_total{data_version=1}":       cn.SnapshotsSent[0],
		"lightq_cluster_partition_snapshots_sent_total{data_version=2}":       cn.SnapshotsSent[1],
		"lightq_cluster_partition_snapshots_received_total":                   cn.SnapshotsReceived,
		"lightq_cluster_partition_snapshots_applied_total":                    cn.SnapshotsApplied,
		"lightq_cluster_partition_damage_found_total{found_by=open}":          cn.DamageFound[cpart.FoundAtOpen],
		"lightq_cluster_partition_damage_found_total{found_by=scrub}":         cn.DamageFound[cpart.FoundByScrub],
		"lightq_cluster_partition_damage_found_total{found_by=read}":          cn.DamageFound[cpart.FoundByRead],
		"lightq_cluster_partition_damage_repaired_total{found_by=open}":       cn.DamageRepaired[cpart.FoundAtOpen],
		"lightq_cluster_partition_damage_repaired_total{found_by=scrub}":      cn.DamageRepaired[cpart.FoundByScrub],
		"lightq_cluster_partition_damage_repaired_total{found_by=read}":       cn.DamageRepaired[cpart.FoundByRead],
		"lightq_cluster_partition_check_failures_total{check=batch}":          cn.CheckFailures[0],
		"lightq_cluster_partition_check_failures_total{check=raft_index}":     cn.CheckFailures[1],
		"lightq_cluster_partition_check_failures_total{check=leader_epoch}":   cn.CheckFailures[2],
		"lightq_cluster_partition_entries_cut_total":                          cn.EntriesCut,
	}
	if int(n) != len(want) {
		t.Fatalf("cpart.Counts has %d values, %d are checked here", n, len(want))
	}
	ch := make(chan prometheus.Metric, 2*len(want))
	collectCounts(ch, &cn, "events", "3")
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	got := map[string]int64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		key := fqName.FindStringSubmatch(m.Desc().String())[1]
		var extra []string
		topic, part := "", ""
		for _, lp := range d.GetLabel() {
			switch lp.GetName() {
			case "topic":
				topic = lp.GetValue()
			case "partition":
				part = lp.GetValue()
			default:
				extra = append(extra, lp.GetName()+"="+lp.GetValue())
			}
		}
		if topic != "events" || part != "3" || d.GetCounter() == nil {
			t.Fatalf("%s: labels %v, counter %v", key, d.GetLabel(), d.GetCounter())
		}
		if len(extra) > 0 {
			slices.Sort(extra)
			key += "{" + strings.Join(extra, ",") + "}"
		}
		if _, dup := got[key]; dup {
			t.Fatalf("%s twice", key)
		}
		got[key] = int64(d.GetCounter().GetValue())
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s is not checked here", k)
		}
	}
}

// fill gives every int64 in v (a struct, arrays of them included) the next value of n.
func fill(v reflect.Value, n *int64) {
	switch v.Kind() {
	case reflect.Int64:
		*n++
		v.SetInt(*n)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), n)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	}
}
