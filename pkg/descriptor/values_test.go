package descriptor

import (
	"slices"
	"strings"
	"testing"
)

func TestParseValueView(t *testing.T) {
	tests := []struct {
		in   string
		want ValueView
		err  string
	}{
		{in: "plain", want: ValuesPlain},
		{in: "hash", want: ValuesHash},
		{in: "HASH", want: ValuesHash},
		{in: "", err: `unknown value view "" (want plain or hash)`},
		{in: "sha256", err: `unknown value view "sha256" (want plain or hash)`},
	}
	for _, tt := range tests {
		got, err := ParseValueView(tt.in)
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("ParseValueView(%q): error %v, want %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseValueView(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		case tt.err == "" && got.String() != strings.ToLower(tt.in):
			t.Errorf("ParseValueView(%q).String() = %q", tt.in, got)
		}
	}
}

// TestShow pins the hashed form to vectors computed outside Go, as an
// operator would: printf %s VALUE | sha256sum | cut -c1-12.
func TestShow(t *testing.T) {
	tests := []struct {
		value, hashed string
	}{
		{"sk-live-1", "sha256:f8dc9db173ee"},
		{"sk-live-4f9c2a7e1b8d", "sha256:e8bc0a2cd3a4"},
		{"acme", "sha256:822b33ad87c1"},
		{"é", "sha256:4a99557e4033"}, // the UTF-8 bytes are hashed
		{"", ""},                     // nothing to hide
	}
	for _, tt := range tests {
		if got := ValuesHash.Show(tt.value); got != tt.hashed {
			t.Errorf("ValuesHash.Show(%q) = %q, want %q", tt.value, got, tt.hashed)
		}
		if got := ValuesPlain.Show(tt.value); got != tt.value {
			t.Errorf("ValuesPlain.Show(%q) = %q, want it as is", tt.value, got)
		}
		var zero ValueView
		if got := zero.Show(tt.value); got != tt.value {
			t.Errorf("the zero ValueView shows %q as %q, want it as is", tt.value, got)
		}
	}
}

// TestShowEntries checks that only values are hashed, and that the
// entries given are left as they were.
func TestShowEntries(t *testing.T) {
	in := []Entry{{Key: "api_key", Value: "sk-live-1"}, {Key: "tenant", Value: "acme"}}
	orig := slices.Clone(in)
	want := []Entry{{Key: "api_key", Value: "sha256:f8dc9db173ee"}, {Key: "tenant", Value: "sha256:822b33ad87c1"}}
	if got := ValuesHash.ShowEntries(in); !slices.Equal(got, want) {
		t.Errorf("ValuesHash.ShowEntries = %v, want %v", got, want)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("ValuesHash.ShowEntries changed its argument to %v", in)
	}
	if got := ValuesPlain.ShowEntries(in); !slices.Equal(got, orig) {
		t.Errorf("ValuesPlain.ShowEntries = %v, want %v", got, orig)
	}
	if got := ValuesHash.ShowEntries(nil); got != nil {
		t.Errorf("ValuesHash.ShowEntries(nil) = %v, want nil", got)
	}
}
