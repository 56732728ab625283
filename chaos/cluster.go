package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the checker's and the admin's driver

	"github.com/threadline/threadline/chaos/check"
	"github.com/threadline/threadline/internal/faultproxy"
)

// Build compiles cmd/threadline into dir and returns the binary's path.
// It runs the go command, so it works from within the module.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "threadline")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/threadline/threadline/cmd/threadline").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Cluster is N serve processes on one fresh database, each behind its own
// proxies.
type Cluster struct {
	cfg *Config
	bus string
	// dir holds the instances' logs while the scenario runs.
	dir string

	admin  *sql.DB
	dbName string
	// DB is a direct connection to the scenario's database (no proxy): the
	// harness's own view.
	DB        *sql.DB
	Instances []*Instance

	j        *journal
	mu       sync.Mutex
	observed []check.Anomaly
}

// Instance is one serve process slot: its port and proxies stay, the
// process may be killed and started again (a new process is a new
// instance id).
type Instance struct {
	Index int
	URL   string
	// PG and Bus are the proxies of its PostgreSQL and bus links.
	PG, Bus *faultproxy.Proxy

	cl      *Cluster
	addr    string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	id      string
	started time.Time
	exited  chan struct{}
	// expectExit is set before the harness kills or stops the process.
	expectExit bool
	stopped    bool
	starts     int
	// exit is how the last process ended (nil while it runs, or for a
	// clean exit).
	exit error
}

// randomName is a short random hex string for database and channel names.
func randomName() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withDatabase returns the DSN with another database and, when hostport is
// set, another address.
func withDatabase(dsn, db, hostport string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("chaos: the PostgreSQL DSN must be a postgres:// URL: %q", dsn)
	}
	u.Path = "/" + db
	if hostport != "" {
		u.Host = hostport
	}
	return u.String(), nil
}

func hostPort(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		switch u.Scheme {
		case "redis", "rediss":
			host = net.JoinHostPort(host, "6379")
		default:
			host = net.JoinHostPort(host, "5432")
		}
	}
	return host, nil
}

// StartCluster creates a fresh database and starts cfg.Instances serve
// processes on it with the bus, each behind its own proxies. logDir holds
// their logs. On error, whatever started is stopped, and an instance that
// did not start is named with the last lines of its log.
func StartCluster(ctx context.Context, cfg *Config, bus, logDir string, j *journal) (*Cluster, error) {
	cl := &Cluster{cfg: cfg, bus: bus, dir: logDir, j: j}
	// Not the named result: every failure returns a nil cluster, and the
	// one to stop is the one built here.
	if err := cl.start(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

func (cl *Cluster) start(ctx context.Context) (err error) {
	cfg, bus, logDir := cl.cfg, cl.bus, cl.dir
	if cl.admin, err = sql.Open("postgres", cfg.DatabaseURL); err != nil {
		return err
	}
	cl.dbName = "chaos_" + randomName()
	if _, err = cl.admin.ExecContext(ctx, `CREATE DATABASE `+cl.dbName); err != nil {
		cl.dbName = ""
		return fmt.Errorf("create database: %w", err)
	}
	direct, err := withDatabase(cfg.DatabaseURL, cl.dbName, "")
	if err != nil {
		return err
	}
	if cl.DB, err = sql.Open("postgres", direct); err != nil {
		return err
	}
	cl.DB.SetMaxOpenConns(4)
	pgAddr, err := hostPort(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	var busTarget, redisDB string
	channel := "chaos-" + randomName()
	if bus == "redis" {
		if busTarget, err = hostPort(cfg.RedisURL); err != nil {
			return err
		}
		u, _ := url.Parse(cfg.RedisURL)
		redisDB = strings.TrimPrefix(u.Path, "/")
		if redisDB == "" {
			redisDB = "0"
		}
	} else {
		busTarget = pgAddr
	}
	for i := range cfg.Instances {
		in := &Instance{Index: i + 1, cl: cl, logPath: filepath.Join(logDir, fmt.Sprintf("instance-%d.log", i+1))}
		cl.Instances = append(cl.Instances, in)
		if in.PG, err = faultproxy.Listen(pgAddr); err != nil {
			return err
		}
		if in.Bus, err = faultproxy.Listen(busTarget); err != nil {
			return err
		}
		if in.addr, err = freeAddr(); err != nil {
			return err
		}
		in.URL = "http://" + in.addr
		store, err := withDatabase(cfg.DatabaseURL, cl.dbName, in.PG.Addr())
		if err != nil {
			return err
		}
		// Each instance's bus goes through its own proxy, so a bus fault
		// hits that link only: Redis by address, LISTEN/NOTIFY by a DSN
		// of its own (the postgres:// bus form; the fresh database makes
		// its default channel this scenario's alone).
		busSpec := "redis://" + in.Bus.Addr() + "/" + redisDB + "?channel=" + channel
		if bus == "postgres" {
			if busSpec, err = withDatabase(cfg.DatabaseURL, cl.dbName, in.Bus.Addr()); err != nil {
				return err
			}
		}
		in.args = []string{"serve", "-addr", in.addr, "-store", store, "-bus", busSpec,
			"-lease", cfg.Lease.String(), "-lease-renew", cfg.LeaseRenew.String(),
			"-script-delay", cfg.ScriptDelay.String(), "-log-level", "info"}
		if cfg.DrainTimeout > 0 {
			in.args = append(in.args, "-drain-timeout", cfg.DrainTimeout.String())
		}
		if cfg.ShutdownTimeout > 0 {
			in.args = append(in.args, "-shutdown-timeout", cfg.ShutdownTimeout.String())
		}
		in.args = append(in.args, cfg.serveArgs...)
		// One at a time: the first applies the schema.
		if err = in.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// observe records an anomaly the cluster saw (an instance that exited).
func (cl *Cluster) observe(a check.Anomaly) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.observed = append(cl.observed, a)
}

// Observed returns the anomalies the cluster saw.
func (cl *Cluster) Observed() []check.Anomaly {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]check.Anomaly(nil), cl.observed...)
}

// Close kills every process, closes the proxies and drops the database.
func (cl *Cluster) Close() {
	for _, in := range cl.Instances {
		in.kill()
		if in.PG != nil {
			in.PG.Close()
		}
		if in.Bus != nil {
			in.Bus.Close()
		}
	}
	if cl.DB != nil {
		cl.DB.Close()
	}
	if cl.admin != nil {
		if cl.dbName != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := cl.admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+cl.dbName+` WITH (FORCE)`); err != nil {
				cl.cfg.progress("drop database %s: %v", cl.dbName, err)
			}
			cancel()
		}
		cl.admin.Close()
	}
}

// HealAll ends every link fault and resumes stopped processes.
func (cl *Cluster) HealAll() {
	for _, in := range cl.Instances {
		in.PG.Heal()
		in.Bus.Heal()
		in.Continue()
	}
}

// ByID returns the instance whose current process has the id.
func (cl *Cluster) ByID(id string) *Instance {
	for _, in := range cl.Instances {
		if in.ID() == id {
			return in
		}
	}
	return nil
}

// listening is the log line a serve process writes once it serves.
var listening = regexp.MustCompile(`msg="threadline listening".* instance=(\S+)`)

// logSink appends a process's output to its log file and reports the
// instance id from the line that says it listens.
type logSink struct {
	f    *os.File
	buf  bytes.Buffer
	id   chan string
	sent bool
}

func (s *logSink) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if !s.sent {
		s.buf.Write(p)
		sc := bufio.NewScanner(bytes.NewReader(s.buf.Bytes()))
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				s.id <- m[1]
				s.sent = true
				s.buf.Reset()
				break
			}
		}
	}
	return n, err
}

// Start starts the instance's process and waits until it serves.
func (in *Instance) Start(ctx context.Context) error {
	f, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.starts++
	fmt.Fprintf(f, "=== harness: start %d of instance %d at %s\n", in.starts, in.Index, time.Now().Format(time.RFC3339Nano))
	sink := &logSink{f: f, id: make(chan string, 1)}
	cmd := exec.Command(in.cl.cfg.Binary, in.args...)
	cmd.Stdout, cmd.Stderr = sink, sink
	cmd.Env = serverEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		in.mu.Unlock()
		f.Close()
		return fmt.Errorf("start instance %d: %w", in.Index, err)
	}
	exited := make(chan struct{})
	in.cmd, in.exited, in.expectExit, in.stopped, in.id, in.exit = cmd, exited, false, false, "", nil
	in.started = time.Now()
	in.mu.Unlock()
	go in.wait(cmd, exited, f)

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	var id string
	select {
	case id = <-sink.id:
	case <-exited:
		return in.startFailure("exited at start")
	case <-deadline.C:
		in.kill()
		return in.startFailure("did not start within 30s")
	case <-ctx.Done():
		in.kill()
		return ctx.Err()
	}
	in.mu.Lock()
	in.id = id
	in.mu.Unlock()
	in.cl.j.printf("instance %d started as %s", in.Index, id)
	for {
		res, err := http.Get(in.URL + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return in.startFailure("exited at start")
		case <-deadline.C:
			in.kill()
			return in.startFailure(fmt.Sprintf("does not answer /health (%v)", err))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startFailure explains an instance that did not start: how its process
// ended and the last lines it wrote, which usually say why.
func (in *Instance) startFailure(what string) error {
	in.mu.Lock()
	exit := in.exit
	in.mu.Unlock()
	if exit != nil {
		what += " (" + exitWords(exit) + ")"
	}
	last := logTail(in.logPath, 5)
	if last == "" {
		last = "(nothing)"
	}
	return fmt.Errorf("instance %d %s; it last wrote: %s; its log is %s", in.Index, what, last, in.logPath)
}

// logTail is the last n lines a process wrote to its log, the harness's
// own lines left out, joined with " | ".
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const most = 8 << 10 // the end of a log is enough to say why
	if st, err := f.Stat(); err == nil && st.Size() > most {
		_, _ = f.Seek(-most, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, most))
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "=== harness:") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// wait reaps the process and reports an exit the harness did not cause.
func (in *Instance) wait(cmd *exec.Cmd, exited chan struct{}, f *os.File) {
	err := cmd.Wait()
	in.mu.Lock()
	expected, id := in.expectExit, in.id
	in.exit = err
	in.mu.Unlock()
	fmt.Fprintf(f, "=== harness: instance %d (%s) exited at %s: %v\n", in.Index, id, time.Now().Format(time.RFC3339Nano), exitWords(err))
	f.Close()
	close(exited)
	in.cl.j.printf("instance %d (%s) exited: %v", in.Index, id, exitWords(err))
	if !expected {
		in.cl.observe(check.Anomaly{Kind: check.InstanceExit,
			Detail: fmt.Sprintf("instance %d (%s) exited by itself: %v; its log is %s", in.Index, id, exitWords(err), filepath.Base(in.logPath))})
	}
}

func exitWords(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// serverEnv is the harness's environment without THREADLINE_ settings,
// which would change the servers' configuration behind the flags.
func serverEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "THREADLINE_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

// ID is the current process's instance id ("" while none runs).
func (in *Instance) ID() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.id
}

// Name is how reports name the instance: its slot and current id.
func (in *Instance) Name() string {
	return fmt.Sprintf("#%d(%s)", in.Index, in.ID())
}

// Running reports whether a process runs in the slot (stopped counts).
func (in *Instance) Running() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.exited == nil {
		return false
	}
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

// signal sends a signal to the current process, marking the exit it may
// cause as the harness's.
func (in *Instance) signal(sig syscall.Signal, expectExit bool) (exited chan struct{}, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.exited == nil {
		return nil, errors.New("no process")
	}
	if expectExit {
		in.expectExit = true
	}
	switch sig {
	case syscall.SIGSTOP:
		in.stopped = true
	case syscall.SIGCONT:
		in.stopped = false
	}
	return in.exited, in.cmd.Process.Signal(sig)
}

// Kill9 kills the process with SIGKILL and waits for it.
func (in *Instance) Kill9() error {
	exited, err := in.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	<-exited
	return nil
}

// Stop pauses the process with SIGSTOP.
func (in *Instance) Stop() error {
	_, err := in.signal(syscall.SIGSTOP, false)
	return err
}

// Continue resumes a stopped process.
func (in *Instance) Continue() {
	in.mu.Lock()
	stopped := in.stopped
	in.mu.Unlock()
	if stopped {
		_, _ = in.signal(syscall.SIGCONT, false)
	}
}

// Terminate sends SIGTERM and waits for the process to exit, up to limit;
// an exit that is not clean, or none, is an anomaly.
func (in *Instance) Terminate(limit time.Duration) error {
	id := in.ID()
	exited, err := in.signal(syscall.SIGTERM, true)
	if err != nil {
		return err
	}
	select {
	case <-exited:
		in.mu.Lock()
		state := in.cmd.ProcessState
		in.mu.Unlock()
		if state != nil && !state.Success() {
			in.cl.observe(check.Anomaly{Kind: check.InstanceExit,
				Detail: fmt.Sprintf("instance %d (%s) ended %v after SIGTERM; its log is %s", in.Index, id, state, filepath.Base(in.logPath))})
		}
		return nil
	case <-time.After(limit):
		in.cl.observe(check.Anomaly{Kind: check.InstanceExit,
			Detail: fmt.Sprintf("instance %d (%s) did not exit within %v of SIGTERM; killed; its log is %s", in.Index, id, limit, filepath.Base(in.logPath))})
		in.kill()
		return nil
	}
}

// kill ends the process at once, whatever its state.
func (in *Instance) kill() {
	in.mu.Lock()
	cmd, exited := in.cmd, in.exited
	if cmd == nil || exited == nil {
		in.mu.Unlock()
		return
	}
	in.expectExit = true
	in.mu.Unlock()
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-exited
}
