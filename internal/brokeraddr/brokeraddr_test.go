package brokeraddr

import "testing"

func TestWithDefaultPort(t *testing.T) {
	for in, want := range map[string]string{
		"localhost":       "localhost:7450",
		"10.0.0.7":        "10.0.0.7:7450",
		"broker.internal": "broker.internal:7450",
		"[::1]":           "[::1]:7450",
		"::1":             "[::1]:7450",
		"fe80::1%eth0":    "[fe80::1%eth0]:7450",
		"localhost:9000":  "localhost:9000",
		"[::1]:9000":      "[::1]:9000",
		"127.0.0.1:0":     "127.0.0.1:0",
		"localhost:":      "localhost:",
		"[::1":            "[::1",
		"":                "",
	} {
		if got := WithDefaultPort(in); got != want {
			t.Errorf("WithDefaultPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestListWithDefaultPort(t *testing.T) {
	for in, want := range map[string]string{
		"localhost":                       "localhost:7450",
		"b1,b2:9000, [::1] ":              "b1:7450,b2:9000,[::1]:7450",
		"10.0.0.1:7450,10.0.0.2,10.0.0.3": "10.0.0.1:7450,10.0.0.2:7450,10.0.0.3:7450",
		"b1,,b2":                          "b1:7450,,b2:7450",
		"":                                "",
	} {
		if got := ListWithDefaultPort(in); got != want {
			t.Errorf("ListWithDefaultPort(%q) = %q, want %q", in, got, want)
		}
	}
}
