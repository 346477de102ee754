package rlsclient

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

func TestParseDescriptor(t *testing.T) {
	tests := []struct {
		in      string
		want    []descriptor.Entry
		wantErr string
	}{
		{in: "api_key=k1", want: []descriptor.Entry{{Key: "api_key", Value: "k1"}}},
		{in: "a=1,b=x=y", want: []descriptor.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "x=y"}}},
		{in: "a=", want: []descriptor.Entry{{Key: "a", Value: ""}}},
		{in: "", wantErr: "empty descriptor"},
		{in: "a", wantErr: `entry "a" is not key=value`},
		{in: "a=1,=2", wantErr: `entry "=2" is not key=value`},
		{in: "a=1,", wantErr: `entry "" is not key=value`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDescriptor(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseDescriptor(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDescriptor(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseDescriptor(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestWaitReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		t.Errorf("WaitReady on a listening server: %v", err)
	}

	// A port that was just freed refuses connections.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	bad, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.WaitReady(ctx)
	if err == nil || !strings.Contains(err.Error(), "connecting to "+addr) {
		t.Errorf("WaitReady on a closed port: error = %v, want one naming %s", err, addr)
	}
}
