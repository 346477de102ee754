package record

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
)

// DefaultMaxBytes is the size at which a recording file rotates when
// Options.MaxBytes is 0.
const DefaultMaxBytes = 1 << 30

// DefaultQueue is the number of lines waiting to be written when
// Options.Queue is 0.
const DefaultQueue = 8192

// DefaultStopWait is how long Stop and Close wait for a recording's
// last writes when Options.StopWait is 0.
const DefaultStopWait = 5 * time.Second

// The errors of Start and Stop, for callers to test with errors.Is. The
// admin API answers ErrNoFile and ErrInvalid 400, ErrRecording 409 and
// ErrNotRecording 404.
var (
	ErrNoFile       = errors.New("no recording file is configured (--record-file)")
	ErrRecording    = errors.New("a recording is already on")
	ErrNotRecording = errors.New("no recording is on")
	ErrInvalid      = errors.New("invalid recording")
	// ErrStuck reports a recording whose file took no writes for
	// Options.StopWait after it was stopped, such as a hung disk or a
	// pipe nobody reads: its writer is left to finish when the file takes
	// them, and a new recording cannot start until it has.
	ErrStuck = errors.New("the recording's file takes no writes")
)

const meterName = "github.com/tollgatehq/tollgate/pkg/record"

// Options configure a Recorder. The zero value records nothing: Start
// fails with ErrNoFile until Path or Output is set.
type Options struct {
	// Path is the recording file; when it grows past MaxBytes it becomes
	// Path.1. Start renames an existing non-empty Path to Path.1 too.
	Path string
	// Output, when set, receives the lines instead of a file, without
	// rotation: for tests.
	Output io.Writer
	// Key is the entry key whose value names the client for sampling;
	// "" means the domain's shard_by key, else the first entry.
	Key string
	// Sample is the share of clients a Span without one records; 0
	// means 1.
	Sample float64
	// MaxBytes bounds a file; 0 means DefaultMaxBytes.
	MaxBytes int64
	// Queue bounds the lines waiting to be written; 0 means
	// DefaultQueue.
	Queue int
	// StopWait bounds how long Stop and Close wait for the last lines to
	// be written; 0 means DefaultStopWait.
	StopWait time.Duration
	// Header returns the rules hash and live overrides for each file's
	// header, when it opens; nil writes none of them.
	Header func() Header
	// Now is the clock of the start, the span's end and the override
	// lines; nil means time.Now. Call lines carry the engine's time.
	Now func() time.Time
	// Logger receives write errors; nil discards.
	Logger *slog.Logger
	// MeterProvider provides tollgate_record_dropped; nil means none.
	MeterProvider metric.MeterProvider
}

// Span is what Start records: for how long (0: until Stop), and the
// share of clients (0 means Options.Sample).
type Span struct {
	Duration time.Duration
	Sample   float64
}

// Status describes the recording that is on, or else the last one.
type Status struct {
	On   bool   `json:"on"`
	File string `json:"file,omitempty"`
	// Since and Until bound the recording; Until is absent for one
	// without an end.
	Since  *time.Time `json:"since,omitempty"`
	Until  *time.Time `json:"until,omitempty"`
	Sample float64    `json:"sample,omitempty"`
	// Lines counts the call and override lines written, and Dropped
	// those the queue had no room for (or that failed to write).
	Lines   int64 `json:"lines"`
	Dropped int64 `json:"dropped"`
}

// Recorder records decided calls while a recording is on; it is the
// engine's limiter.Recorder. Off, Record costs one atomic load. It is
// safe for concurrent use.
type Recorder struct {
	opts    Options
	log     *slog.Logger
	dropped metric.Int64Counter

	// lines recycles the buffers of lines once written, so that
	// recording allocates nothing per call.
	lines sync.Pool // *[]byte

	cur  atomic.Pointer[session]
	mu   sync.Mutex // serializes Start, Stop and Close
	last *session   // the latest session started; guarded by mu
}

var _ limiter.Recorder = (*Recorder)(nil)

// New returns a Recorder with no recording on.
func New(opts Options) (*Recorder, error) {
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("record: negative maximum size %d", opts.MaxBytes)
	}
	if opts.Queue < 0 {
		return nil, fmt.Errorf("record: negative queue %d", opts.Queue)
	}
	if !(opts.Sample >= 0 && opts.Sample <= 1) {
		return nil, fmt.Errorf("record: sample %v is not in [0, 1]", opts.Sample)
	}
	if opts.Sample == 0 {
		opts.Sample = 1
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Queue == 0 {
		opts.Queue = DefaultQueue
	}
	if opts.StopWait <= 0 {
		opts.StopWait = DefaultStopWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Recorder{opts: opts, log: opts.Logger}
	r.lines.New = func() any { b := make([]byte, 0, 256); return &b }
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("component", "record")
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	var err error
	r.dropped, err = mp.Meter(meterName).Int64Counter("tollgate_record_dropped",
		metric.WithDescription("Recording lines dropped because the queue to the file was full or the write failed."),
		metric.WithUnit("{line}"))
	if err != nil {
		return nil, fmt.Errorf("record: creating instruments: %w", err)
	}
	return r, nil
}

// session is one recording.
type session struct {
	r      *Recorder
	all    bool   // every client
	below  uint64 // else a client is recorded when its hash is below
	key    string
	queue  chan *[]byte
	file   string
	start  time.Time
	until  time.Time // zero: none
	sample float64

	stopped atomic.Bool
	lines   atomic.Int64
	dropped atomic.Int64
	cancel  context.CancelFunc
	done    chan struct{}
}

// Start begins a recording into the configured file: ErrNoFile without
// one, ErrRecording while one is on, ErrInvalid for a negative duration
// or a sample outside (0, 1]. The file's header is written before Start
// returns.
func (r *Recorder) Start(span Span) error {
	if r.opts.Path == "" && r.opts.Output == nil {
		return ErrNoFile
	}
	if span.Sample == 0 {
		span.Sample = r.opts.Sample
	}
	if !(span.Sample > 0 && span.Sample <= 1) {
		return fmt.Errorf("%w: sample %v is not in (0, 1]", ErrInvalid, span.Sample)
	}
	if span.Duration < 0 {
		return fmt.Errorf("%w: negative duration %v", ErrInvalid, span.Duration)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur.Load() != nil {
		return ErrRecording
	}
	if r.last != nil {
		select {
		case <-r.last.done: // its file is closed before the next one opens
		default:
			return fmt.Errorf("%w: %w: the last one's writes are not done", ErrRecording, ErrStuck)
		}
	}
	now := r.opts.Now()
	s := &session{r: r, key: r.opts.Key, queue: make(chan *[]byte, r.opts.Queue), file: r.opts.Path,
		start: now, sample: span.Sample, done: make(chan struct{})}
	if span.Duration > 0 {
		s.until = now.Add(span.Duration)
	}
	if span.Sample >= 1 {
		s.all = true
	} else {
		s.below = uint64(math.Ldexp(span.Sample, 64))
	}
	w := &output{path: r.opts.Path, max: r.opts.MaxBytes, header: s.header}
	if err := w.open(r.opts.Output); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	r.last = s
	r.cur.Store(s)
	go s.run(ctx, w, span.Duration)
	r.log.Info("recording started", "file", s.file, "sample", s.sample, "duration", span.Duration)
	return nil
}

// Stop ends the recording that is on, waits until its file is written
// and closed, and returns its final status; ErrNotRecording when none is
// on, and the status so far and ErrStuck when the file took no writes
// for Options.StopWait.
func (r *Recorder) Stop() (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.cur.Load()
	if s == nil {
		return Status{}, ErrNotRecording
	}
	r.cur.CompareAndSwap(s, nil)
	s.cancel()
	if !r.wait(s) {
		return s.status(false), ErrStuck
	}
	return s.status(false), nil
}

// Close stops the recording that is on, if any, and waits for its
// goroutine, at most Options.StopWait.
func (r *Recorder) Close() {
	if _, err := r.Stop(); !errors.Is(err, ErrNotRecording) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil {
		r.wait(r.last)
	}
}

// wait waits for s's writer to close its file, at most StopWait, and
// reports whether it did.
func (r *Recorder) wait(s *session) bool {
	t := time.NewTimer(r.opts.StopWait)
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
		r.log.Error("the recording's file takes no writes; stopped without them", "file", s.file,
			"waited", r.opts.StopWait, "lines", s.lines.Load())
		return false
	}
}

// Status describes the recording that is on, or the last one (On
// false), or none.
func (r *Recorder) Status() Status {
	if s := r.cur.Load(); s != nil {
		return s.status(true)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return Status{}
	}
	return r.last.status(false)
}

func (s *session) status(on bool) Status {
	st := Status{On: on, File: s.file, Since: &s.start, Sample: s.sample, Lines: s.lines.Load(), Dropped: s.dropped.Load()}
	if !s.until.IsZero() {
		st.Until = &s.until
	}
	return st
}

// Record offers the line of a decided request to the recording that is
// on, when its client is sampled; see limiter.Recorder.
func (r *Recorder) Record(now time.Time, dom *descriptor.Domain, req *limiter.Request, resp *limiter.Response) {
	s := r.cur.Load()
	if s == nil || s.stopped.Load() || !s.sampled(dom, req) {
		return
	}
	line := r.lines.Get().(*[]byte)
	*line = appendCall((*line)[:0], now, req, resp)
	s.offer(line)
}

// Override records an override created or deleted (ChangeCreated,
// ChangeDeleted) while a recording is on.
func (r *Recorder) Override(change string, o override.Override) {
	s := r.cur.Load()
	if s == nil || s.stopped.Load() {
		return
	}
	b, err := json.Marshal(struct {
		Type string `json:"type"`
		OverrideChange
	}{TypeOverride, OverrideChange{Time: r.opts.Now().UnixMicro(), Change: change, Override: o}})
	if err != nil {
		r.log.Warn("encoding an override change", "error", err)
		return
	}
	line := append(b, '\n')
	s.offer(&line)
}

// recycle gives line's buffer back to the pool, unless it grew large.
func (r *Recorder) recycle(line *[]byte) {
	if cap(*line) <= 16<<10 {
		r.lines.Put(line)
	}
}

// offer queues line, or counts it dropped.
func (s *session) offer(line *[]byte) {
	select {
	case s.queue <- line:
	default:
		s.drop()
		s.r.recycle(line)
	}
}

func (s *session) drop() {
	s.dropped.Add(1)
	s.r.dropped.Add(context.Background(), 1)
}

// sampled reports whether req's client is recorded.
func (s *session) sampled(dom *descriptor.Domain, req *limiter.Request) bool {
	if s.all {
		return true
	}
	return clientHash(s.key, dom, req) < s.below
}

// Client returns the value that names req's client for sampling: the
// value of the entry keyed key in the first descriptor that has one (key
// "": dom's shard_by key, when dom has one), else the first entry's.
func Client(key string, dom *descriptor.Domain, req *limiter.Request) string {
	if key == "" && dom != nil {
		key = dom.ShardBy()
	}
	if key != "" {
		for i := range req.Descriptors {
			for _, e := range req.Descriptors[i].Entries {
				if e.Key == key {
					return e.Value
				}
			}
		}
	}
	if len(req.Descriptors) > 0 && len(req.Descriptors[0].Entries) > 0 {
		return req.Descriptors[0].Entries[0].Value
	}
	return ""
}

// clientHash is the 64-bit FNV-1a hash of req's client, mixed so that
// its high bits, which the sample compares, depend on every byte.
func clientHash(key string, dom *descriptor.Domain, req *limiter.Request) uint64 {
	v := Client(key, dom, req)
	h := uint64(14695981039346656037)
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= 1099511628211
	}
	// The finalizer of SplitMix64.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// header returns the header line of a file opened now.
func (s *session) header() ([]byte, error) {
	var h Header
	if s.r.opts.Header != nil {
		h = s.r.opts.Header()
	}
	h.Version, h.Start, h.Sample, h.Key = Version, s.r.opts.Now().UTC(), s.sample, s.key
	if h.Overrides == nil {
		h.Overrides = []override.Override{}
	}
	b, err := json.Marshal(struct {
		Type string `json:"type"`
		Header
	}{TypeHeader, h})
	if err != nil {
		return nil, fmt.Errorf("encoding the recording's header: %w", err)
	}
	return append(b, '\n'), nil
}

// run writes the queue's lines until the span ends or ctx does, then
// writes what is queued and closes the file.
func (s *session) run(ctx context.Context, w *output, d time.Duration) {
	defer close(s.done)
	var end <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		end = t.C
	}
	failed := false
	write := func(line *[]byte) {
		defer s.r.recycle(line)
		if err := w.write(*line); err != nil {
			s.drop()
			if !failed {
				s.r.log.Warn("writing the recording; dropping lines", "file", s.file, "error", err)
				failed = true
			}
			return
		}
		s.lines.Add(1)
	}
loop:
	for {
		select {
		case line := <-s.queue:
			write(line)
			if len(s.queue) == 0 {
				if err := w.flush(); err != nil && !failed {
					s.r.log.Warn("writing the recording", "file", s.file, "error", err)
					failed = true
				}
			}
		case <-end:
			s.r.cur.CompareAndSwap(s, nil)
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	s.stopped.Store(true)
	for {
		select {
		case line := <-s.queue:
			write(line)
			continue
		default:
		}
		break
	}
	if err := w.close(); err != nil {
		s.r.log.Warn("closing the recording", "file", s.file, "error", err)
	}
	s.r.log.Info("recording stopped", "file", s.file, "lines", s.lines.Load(), "dropped", s.dropped.Load())
}

// output is a recording's file, rotated at max bytes, or a writer.
type output struct {
	path   string
	max    int64
	header func() ([]byte, error)
	f      *os.File
	w      io.Writer
	bw     *bufio.Writer
	size   int64
}

// open starts the output: to to when not nil, else a new file at path
// (an existing non-empty one becomes path.1), with a header.
func (o *output) open(to io.Writer) error {
	if to != nil {
		o.w = to
		o.bw = bufio.NewWriter(to)
		return o.begin()
	}
	if fi, err := os.Stat(o.path); err == nil && fi.Size() > 0 {
		if err := os.Rename(o.path, o.path+".1"); err != nil {
			return fmt.Errorf("keeping the previous recording: %w", err)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("opening the recording: %w", err)
	}
	return o.create()
}

// create creates the file at path, 0600, and writes its header.
func (o *output) create() error {
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("opening the recording: %w", err)
	}
	// The mode of a file that was there is not the umask's to decide.
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("opening the recording: %w", err)
	}
	o.f, o.size = f, 0
	if o.bw == nil {
		o.bw = bufio.NewWriterSize(f, 64<<10)
	} else {
		o.bw.Reset(f)
	}
	return o.begin()
}

// begin writes the header and flushes it.
func (o *output) begin() error {
	h, err := o.header()
	if err != nil {
		return err
	}
	if _, err := o.bw.Write(h); err != nil {
		return fmt.Errorf("writing the recording's header: %w", err)
	}
	o.size += int64(len(h))
	if err := o.bw.Flush(); err != nil {
		return fmt.Errorf("writing the recording's header: %w", err)
	}
	return nil
}

// write writes line, first rotating the file when the line would take it
// past max.
func (o *output) write(line []byte) error {
	if o.f != nil && o.size+int64(len(line)) > o.max {
		if err := o.rotate(); err != nil {
			return err
		}
	}
	n, err := o.bw.Write(line)
	o.size += int64(n)
	return err
}

// rotate moves the full file to path.1 and begins a new one.
func (o *output) rotate() error {
	if err := o.bw.Flush(); err != nil {
		return err
	}
	if err := o.f.Close(); err != nil {
		return err
	}
	o.f = nil
	if err := os.Rename(o.path, o.path+".1"); err != nil {
		return fmt.Errorf("rotating the recording: %w", err)
	}
	return o.create()
}

func (o *output) flush() error { return o.bw.Flush() }

func (o *output) close() error {
	err := o.bw.Flush()
	if o.f != nil {
		err = errors.Join(err, o.f.Close())
		o.f = nil
	}
	return err
}
