package redistest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
)

// A replica whose link is up is not yet in sync with its master. After a
// diskless full sync, which the harness runs with no delay, the master streams
// the RDB and then holds every later write for the replica until a REPLCONF ACK
// from it arrives after the master has reaped its RDB child. The replica sends
// one ACK right after loading, which a busy machine delivers before that, and
// then one a second. So for up to a second the replica reports
// master_link_status:up and the master lists it as state=online, while nothing
// written on the master reaches it, and a master killed then takes its
// acknowledged writes with it. waitSynced proves the stream flows instead:
// it writes on the master and waits until the replica has applied the write.

// syncKeyPrefix begins the key that the harness sets and deletes in one
// MULTI/EXEC on a master, so no client ever sees it.
const syncKeyPrefix = "redistest:sync:"

// syncMark is the end of the replication stream of a master right after a
// write of the harness.
type syncMark struct {
	master string // address of the master
	replid string // master_replid of the master
	offset int64  // master_repl_offset of the master
}

// waitSynced polls until s, when it is a replica, has its link to its master
// up and has applied a write made on that master after the link came up. For
// a master it returns at once. It gives up after timeout.
func waitSynced(s *Server, timeout time.Duration) error {
	var mark *syncMark
	return polltest.Poll(timeout, 20*time.Millisecond, nil, func() error {
		info, err := commandString(s.Addr, s.password, "INFO", "replication")
		if err != nil {
			return err
		}
		if role, _ := infoField(info, "role"); role != "slave" {
			return nil
		}
		if link, _ := infoField(info, "master_link_status"); link != "up" {
			return fmt.Errorf("master_link_status:%s", link)
		}
		host, _ := infoField(info, "master_host")
		port, _ := infoField(info, "master_port")
		master := net.JoinHostPort(host, port)
		replid, _ := infoField(info, "master_replid")
		// A new master, or a new history of the same one, needs a new mark:
		// offsets compare only within one replication ID.
		if mark == nil || mark.master != master || mark.replid != replid {
			if mark, err = markStream(master, s.password, s.cluster); err != nil {
				return fmt.Errorf("writing on master %s: %w", master, err)
			}
			if mark.replid != replid {
				return fmt.Errorf("replication ID %s, master %s has %s", replid, master, mark.replid)
			}
		}
		v, _ := infoField(info, "slave_repl_offset")
		applied, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("slave_repl_offset %q: %w", v, err)
		}
		if applied < mark.offset {
			return fmt.Errorf("applied the stream of %s up to offset %d of %d", master, applied, mark.offset)
		}
		return nil
	})
}

// markStream makes a write on the master at addr that reaches its replicas
// and returns the end of its replication stream after it. On a cluster node
// the key lies in a slot the master serves.
func markStream(addr, password string, cluster bool) (*syncMark, error) {
	key := syncKeyPrefix + "key"
	if cluster {
		ranges, err := clusterSlots(addr, password)
		if err != nil {
			return nil, err
		}
		if key, err = keyServedBy(ranges, addr); err != nil {
			return nil, err
		}
	}
	c, err := dial(addr, password, commandTimeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	for _, cmd := range [][]string{{"MULTI"}, {"SET", key, "1"}, {"DEL", key}, {"EXEC"}} {
		if _, err := c.do(cmd...); err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(cmd, " "), err)
		}
	}
	v, err := c.do("INFO", "replication")
	if err != nil {
		return nil, fmt.Errorf("INFO replication: %w", err)
	}
	info, _ := v.(string)
	replid, _ := infoField(info, "master_replid")
	off, _ := infoField(info, "master_repl_offset")
	offset, err := strconv.ParseInt(off, 10, 64)
	if replid == "" || err != nil {
		return nil, fmt.Errorf("INFO replication has master_replid %q, master_repl_offset %q", replid, off)
	}
	return &syncMark{master: addr, replid: replid, offset: offset}, nil
}

// keyServedBy returns a key, made of syncKeyPrefix and a hash tag, whose slot
// is in one of the ranges that master serves.
func keyServedBy(ranges []slotRange, master string) (string, error) {
	var own []slotRange
	for _, r := range ranges {
		if r.master == master {
			own = append(own, r)
		}
	}
	if len(own) == 0 {
		return "", errors.New("serves no slots")
	}
	// A range of one slot is found within a few times slotCount tags.
	for n := range 64 * slotCount {
		key := syncKeyPrefix + "{" + strconv.Itoa(n) + "}"
		slot := keySlot(key)
		for _, r := range own {
			if r.start <= slot && slot <= r.end {
				return key, nil
			}
		}
	}
	return "", fmt.Errorf("no key found for slots %v", own)
}

// keySlot returns the hash slot of key as Redis Cluster computes it: CRC16
// of the key, or of its hash tag (the text between the first '{' and the
// next '}' when that is not empty), modulo 16384.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) % slotCount
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of Redis Cluster key hashing.
func crc16(s string) uint16 {
	var crc uint16
	for i := range len(s) {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// ReplicaOf makes s a replica of master (REPLICAOF), as a failover does to
// the master it demotes, and waits until s has applied a write made on
// master after the link came up. Connections open to s stay open.
func (s *Server) ReplicaOf(master *Server) {
	s.t.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	if _, err := command(s.Addr, s.password, commandTimeout, "REPLICAOF", host, port); err != nil {
		s.t.Fatalf("redistest: REPLICAOF %s on %s: %v", master.Addr, s.Addr, err)
	}
	if err := waitSynced(s, settleTimeout); err != nil {
		s.t.Fatalf("redistest: replica %s of %s: %v", s.Addr, master.Addr, err)
	}
}

// Promote makes the replica s a master (REPLICAOF NO ONE), as a failover
// does to the replica it promotes, and waits until s reports role:master.
func (s *Server) Promote() {
	s.t.Helper()
	if _, err := command(s.Addr, s.password, commandTimeout, "REPLICAOF", "NO", "ONE"); err != nil {
		s.t.Fatalf("redistest: REPLICAOF NO ONE on %s: %v", s.Addr, err)
	}
	if err := polltest.Poll(settleTimeout, 10*time.Millisecond, nil, func() error {
		info, err := commandString(s.Addr, s.password, "INFO", "replication")
		if err != nil {
			return err
		}
		if role, _ := infoField(info, "role"); role != "master" {
			return fmt.Errorf("role:%s", role)
		}
		return nil
	}); err != nil {
		s.t.Fatalf("redistest: promoting %s: %v", s.Addr, err)
	}
}
