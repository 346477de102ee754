package descriptor

// DiffDomains returns the domains of after that before lacks, those of
// before that after lacks, and those of both whose rules differ, each
// sorted by name and nil when there are none. A domain's rules differ when
// its part of the canonical form that Hash digests differs, so an edit of
// a values file changes its domain and a rename of its rule file does not.
// A nil tree has no domains: DiffDomains(nil, t) names every domain of t
// added.
func DiffDomains(before, after *Tree) (added, removed, changed []string) {
	if before.Hash() == after.Hash() {
		return nil, nil, nil
	}
	old, cur := before.Domains(), after.Domains()
	for len(old) > 0 || len(cur) > 0 {
		switch {
		case len(cur) == 0 || len(old) > 0 && old[0] < cur[0]:
			removed = append(removed, old[0])
			old = old[1:]
		case len(old) == 0 || cur[0] < old[0]:
			added = append(added, cur[0])
			cur = cur[1:]
		default:
			if before.domains[old[0]].digest() != after.domains[cur[0]].digest() {
				changed = append(changed, cur[0])
			}
			old, cur = old[1:], cur[1:]
		}
	}
	return added, removed, changed
}
