package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseTokens parses arbitrary token files, with and without the
// environment's token. It asserts that every token accepted is one of the
// file's fields, of at least MinTokenLen bytes; that the names are unique
// and leave EnvTokenName to the environment when it has a token; and that
// an error never holds a token of the file: no field that stands where a
// token does (the last field of a line of one or two, every field of a
// longer line) of at least MinTokenLen bytes shows in it once the names it
// quotes are taken out. (A name is no secret: a file that uses a token as
// a name shows it wherever names are shown.)
func FuzzParseTokens(f *testing.F) {
	for _, seed := range []string{
		"# admins\nalice alice-token-3f9c1d\nbob   bob-token-0123456789\n",
		"lonely-token-0123456789\n\n   \n# comment alice-token-3f9c1d\n",
		"alice alice-token-3f9c1d\r\nalice other-token-0123456\r\n",
		"alice alice-token-3f9c1d\nbob alice-token-3f9c1d\n",
		"env env-token-81ab44-xyz\n",
		"alice short\n",
		"alice alice-token-3f9c1d extra-field-0123456\n",
		"alice-token-3f9c1d alice-token-3f9c1d\nalice-token-3f9c1d other-token-0123456\n",
		"\talice\u00a0alice-token-3f9c1d\u2028\n",
		"\xff\xfe \xff\xfe\xff\xfe\xff\xfe\xff\xfe\xff\xfe\xff\xfe\xff\xfe\n",
		strings.Repeat("x", 70000) + "\n",
		"",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, reserveEnv bool) {
		tokens, err := parseTokens(data, reserveEnv)

		// The fields of the file, read as parseTokens reads lines.
		fields := map[[sha256.Size]byte]string{}
		var secrets, named []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			fs := strings.Fields(line)
			for _, field := range fs {
				fields[sha256.Sum256([]byte(field))] = field
			}
			switch len(fs) {
			case 2:
				named = append(named, fs[0])
				fallthrough
			case 1:
				secrets = append(secrets, fs[len(fs)-1])
			default:
				secrets = append(secrets, fs...)
			}
		}

		names := map[string]bool{}
		for _, tok := range tokens {
			field, ok := fields[tok.sum]
			switch {
			case !ok:
				t.Fatalf("token %q is no field of the file", tok.name)
			case len(field) < MinTokenLen:
				t.Fatalf("token %q has %d bytes, fewer than %d", tok.name, len(field), MinTokenLen)
			case names[tok.name]:
				t.Fatalf("two tokens named %q", tok.name)
			case reserveEnv && tok.name == EnvTokenName:
				t.Fatalf("a token of the file is named %q, the environment's", EnvTokenName)
			}
			names[tok.name] = true
		}

		if err == nil {
			return
		}
		msg := err.Error()
		for _, name := range named {
			msg = strings.ReplaceAll(msg, strconv.Quote(name), `"NAME"`)
		}
		for _, secret := range secrets {
			if len(secret) >= MinTokenLen && strings.Contains(msg, secret) {
				t.Fatalf("the error shows the token %q: %v", secret, err)
			}
		}
	})
}
