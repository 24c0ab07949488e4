package pvesim

import (
	"errors"
	"net/http"
	"testing"
)

// The download client's dialer refuses every address that is not a loopback IP, whatever name led to it,
// before a connection is made; loopback addresses pass.
func TestDownloadDialerRefusesNonLoopbackAddresses(t *testing.T) {
	tests := []struct {
		address string
		allowed bool
	}{
		{"127.0.0.1:80", true},
		{"127.8.9.10:8006", true},
		{"[::1]:443", true},
		{"192.0.2.1:80", false},
		{"[2001:db8::1]:80", false},
		{"10.0.0.1:80", false},
		{"0.0.0.0:80", false},
	}
	for _, tc := range tests {
		err := loopbackOnlyControl("tcp", tc.address, nil)
		if tc.allowed && err != nil {
			t.Errorf("%s refused: %v", tc.address, err)
		}
		if !tc.allowed && !errors.Is(err, errNotLoopback) {
			t.Errorf("%s: got %v, want a refusal", tc.address, err)
		}
	}
	client, tr := loopbackClient(true)
	defer tr.CloseIdleConnections()
	_, err := client.Get("http://192.0.2.1/x.iso")
	if !errors.Is(err, errNotLoopback) {
		t.Fatalf("a direct request off loopback: got %v, want the dialer's refusal", err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	if _, err := client.Do(req); err == nil || errors.Is(err, errNotLoopback) {
		t.Fatalf("a loopback dial must be attempted (and fail on a closed port): %v", err)
	}
}
