package dataproto

import (
	"reflect"
	"testing"
)

func TestListRoundTrip(t *testing.T) {
	es := []ListEntry{{Handle: 1<<GroupBits | 7, Version: 3, Length: 65536}, {Handle: 2<<GroupBits | 1, Version: 1, Length: 0}}
	got, err := DecodeList(EncodeList(es))
	if err != nil || !reflect.DeepEqual(got, es) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if _, err := DecodeList(make([]byte, ListEntrySize+1)); err == nil {
		t.Fatal("a truncated list decoded")
	}
	bad := EncodeList([]ListEntry{{Handle: 1, Length: -1}})
	if _, err := DecodeList(bad); err == nil {
		t.Fatal("a negative length decoded")
	}
}

func TestMakeHandle(t *testing.T) {
	h, err := MakeHandle(5, 9)
	if err != nil || HandleGroup(h) != 5 || h&(1<<GroupBits-1) != 9 {
		t.Fatalf("MakeHandle(5, 9) = %#x, %v", h, err)
	}
	for _, c := range [][2]uint64{{0, 1}, {1, 0}, {1, 1 << GroupBits}, {1 << (64 - GroupBits), 1}} {
		if _, err := MakeHandle(c[0], c[1]); err == nil {
			t.Errorf("MakeHandle(%d, %d) accepted", c[0], c[1])
		}
	}
}
