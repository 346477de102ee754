package redis

// ApplyAt is Apply, also returning the instant in µs at which the script
// decided the batch's first slot group: the Redis server's TIME when
// Options.Now is nil.
var ApplyAt = (*Store).apply
