package redis

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// scriptCommands lists every Redis command the decision script may call,
// with the Redis version that introduced it and each option the script
// uses. All must be in Redis 6.2, the oldest server the store supports
// (Valkey forked from Redis 7.2.4, so it has them all).
var scriptCommands = map[string]string{
	"DEL":              "1.0.0",
	"GET":              "1.0.0",
	"SET":              "1.0.0; PX 2.6.12",
	"TIME":             "2.6.0",
	"PTTL":             "2.6.0",
	"PEXPIRE":          "2.6.0",
	"ZCARD":            "1.2.0",
	"ZRANGE":           "1.2.0; WITHSCORES 1.2.0",
	"ZREMRANGEBYSCORE": "1.2.0",
	"ZCOUNT":           "2.0.0",
	"ZREMRANGEBYRANK":  "2.0.0",
	"ZADD":             "1.2.0; NX 3.0.2",
}

// redisCall matches a redis.call or redis.pcall and its first argument.
var redisCall = regexp.MustCompile(`redis\.p?call\(\s*([^,)]*)`)

// scriptCommandsIn returns the commands source calls, and every call whose
// command is not a string literal.
func scriptCommandsIn(source string) (commands, dynamic []string) {
	literal := regexp.MustCompile(`^'([A-Z]+)'$`)
	for _, m := range redisCall.FindAllStringSubmatch(source, -1) {
		if c := literal.FindStringSubmatch(m[1]); c != nil {
			commands = append(commands, c[1])
		} else {
			dynamic = append(dynamic, m[0])
		}
	}
	return commands, dynamic
}

// TestScriptCommands checks that the script, in both of the forms it is
// sent in, calls only commands of Redis 6.2, each named literally.
func TestScriptCommands(t *testing.T) {
	for name, source := range map[string]string{"script": applyScript, "function library": applyLibrary} {
		commands, dynamic := scriptCommandsIn(source)
		if len(dynamic) > 0 {
			t.Errorf("%s: calls %q: name each command literally, so this test can check it", name, dynamic)
		}
		if len(commands) == 0 {
			t.Fatalf("%s: found no command", name)
		}
		for _, c := range commands {
			if _, ok := scriptCommands[c]; !ok {
				t.Errorf("%s calls %s, which is not in the commands of Redis 6.2 it may use", name, c)
			}
		}
	}
}

// TestScriptCommandsFindsNewer checks that the extraction finds what
// TestScriptCommands must reject.
func TestScriptCommandsFindsNewer(t *testing.T) {
	commands, dynamic := scriptCommandsIn("local e = redis.call('PEXPIRETIME', key)\nredis.pcall( 'GET', k)\nredis.call(unpack(args))")
	if want := []string{"PEXPIRETIME", "GET"}; !slices.Equal(commands, want) {
		t.Errorf("commands = %q, want %q", commands, want)
	}
	if want := []string{"redis.call(unpack(args"}; !slices.Equal(dynamic, want) {
		t.Errorf("dynamic calls = %q, want %q", dynamic, want)
	}
	if _, ok := scriptCommands["PEXPIRETIME"]; ok {
		t.Error("PEXPIRETIME (Redis 7.0) is allowed")
	}
}

// TestReadmeACLGrantsScriptCommands checks that the README's ACL for
// tollgate's Redis user grants every command the script calls: a script
// runs with its caller's rights, and pkg/app's test of that ACL decides
// with one algorithm only.
func TestReadmeACLGrantsScriptCommands(t *testing.T) {
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "<!-- checked by pkg/app/acl_test.go: tollgate's redis user -->")
	if !ok {
		t.Fatal("README.md has no ACL block for tollgate's redis user")
	}
	block, _, _ = strings.Cut(strings.SplitN(block, "```", 2)[1], "```")
	granted := map[string]bool{}
	for _, f := range strings.Fields(block) {
		if c, ok := strings.CutPrefix(f, "+"); ok {
			granted[strings.ToUpper(c)] = true
		}
	}
	for c := range scriptCommands {
		if !granted[c] {
			t.Errorf("the README's ACL does not grant %s, which the script calls", c)
		}
	}
	for _, c := range []string{"EVALSHA", "SCRIPT|LOAD", "FCALL", "FUNCTION|LOAD", "INFO"} {
		if !granted[c] {
			t.Errorf("the README's ACL does not grant %s, which the store sends", c)
		}
	}
}
