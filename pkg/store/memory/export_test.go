package memory

// Penalties returns the number of penalty states s holds.
func Penalties(s *Store) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.penalties)
		sh.mu.Unlock()
	}
	return n
}
