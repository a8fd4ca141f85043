package testcluster

import "testing"

// A cluster's ports are all picked before any server binds one; the picker
// must never hand out the same port twice, nor one the layout already uses.
func TestPortPickerDistinct(t *testing.T) {
	var p portPicker
	p.avoid("127.0.0.1:20000")
	seen := map[string]bool{"127.0.0.1:20000": true}
	for range 2000 {
		a, err := p.pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("port %s handed out twice (or one the layout already uses)", a)
		}
		seen[a] = true
	}
}
