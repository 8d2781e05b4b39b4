// critest-tools — the few programs that hack/critest.sh's stand-in images need and that
// Debian's busybox does not provide. One static binary (CGO_ENABLED=0), installed in the
// images under several names; what it does depends on the name it was executed as:
//
//	nginx  web server for the e2e-test-images/nginx and hostnet-nginx stand-ins. It
//	       re-executes itself so that its argv reads "nginx: master process nginx ..."
//	       (critest looks for "master process" in /proc/1/cmdline), writes its pid to
//	       /var/run/nginx.pid and `pidof nginx` finds it (comm is "nginx").
//	httpd  the same web server for the e2e-test-images/httpd stand-in; it logs "httpd".
//	nnp    prints "Effective uid: N" (installed setuid root in the nonewprivs stand-in).
//	ipcs   `ipcs -m`: System V shared memory segments of the caller's IPC namespace, in
//	       util-linux/busybox layout (read from /proc/sysvipc/shm).
//	pgrep  `pgrep PATTERN`: pids whose process name matches the regular expression.
//
// Both web servers listen on $WEB_PORT (default 80) on all addresses and answer every
// request with 200 and a small page. SIGTERM, SIGINT and SIGQUIT make them exit 0 at once,
// also as PID 1 of a container.
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

const masterPrefix = "nginx: master process "

func main() {
	name := ""
	if exe, err := os.Executable(); err == nil {
		name = filepath.Base(exe)
	}
	if name == "" || name == "critest-tools" {
		name = filepath.Base(os.Args[0])
	}
	switch name {
	case "nginx":
		nginx()
	case "httpd":
		serve("httpd", "<html><body><h1>It works!</h1></body></html>\n")
	case "nnp":
		fmt.Printf("Effective uid: %d\n", os.Geteuid())
	case "ipcs":
		os.Exit(ipcs(os.Args[1:]))
	case "pgrep":
		os.Exit(pgrep(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "critest-tools: unknown applet %q (nginx, httpd, nnp, ipcs, pgrep)\n", name)
		os.Exit(2)
	}
}

func nginx() {
	if !strings.HasPrefix(os.Args[0], masterPrefix) {
		// Same pid, new argv: what nginx's master process shows in ps and /proc/PID/cmdline.
		exe, err := os.Executable()
		if err != nil {
			fatal("nginx", err)
		}
		argv0 := masterPrefix + "nginx"
		if len(os.Args) > 1 {
			argv0 += " " + strings.Join(os.Args[1:], " ")
		}
		fatal("nginx", syscall.Exec(exe, []string{argv0}, os.Environ()))
	}
	if err := os.MkdirAll("/var/run", 0o755); err != nil {
		fatal("nginx", err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := os.WriteFile("/var/run/nginx.pid", pid, 0o644); err != nil {
		fatal("nginx", err)
	}
	serve("nginx", "<html><body><h1>Welcome to nginx!</h1></body></html>\n")
}

func serve(name, page string) {
	port := os.Getenv("WEB_PORT")
	if port == "" {
		port = "80"
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fatal(name, err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	go func() {
		<-sigs
		if name == "nginx" {
			os.Remove("/var/run/nginx.pid")
		}
		os.Exit(0)
	}()
	fmt.Fprintf(os.Stderr, "%s: stand-in web server (pid %d) listening on :%s\n", name, os.Getpid(), port)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Server", name)
		fmt.Fprint(w, page)
		fmt.Printf("%s: %s %s %s\n", name, r.RemoteAddr, r.Method, r.URL.Path)
	})
	fatal(name, http.Serve(ln, handler))
}

func fatal(name string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(1)
}

// ipcs supports `ipcs` and `ipcs -m` (shared memory only, which is all critest asks for).
func ipcs(args []string) int {
	for _, a := range args {
		if a != "-m" {
			fmt.Fprintf(os.Stderr, "ipcs: only -m is supported, not %q\n", a)
			return 1
		}
	}
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		fmt.Fprintf(os.Stderr, "ipcs: %v\n", err)
		return 1
	}
	defer f.Close()
	fmt.Printf("\n------ Shared Memory Segments --------\n")
	fmt.Printf("%-10s %-10s %-10s %-10s %-10s %-10s %-12s\n", "key", "shmid", "owner", "perms", "bytes", "nattch", "status")
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		if first { // header line
			first = false
			continue
		}
		// key shmid perms size cpid lpid nattch uid gid cuid cgid ...
		fld := strings.Fields(sc.Text())
		if len(fld) < 8 {
			continue
		}
		// key is decimal, perms already octal; the owner is shown as a uid (no passwd lookup).
		key, _ := strconv.ParseInt(fld[0], 10, 64)
		fmt.Printf("0x%08x %-10s %-10s %-10s %-10s %-10s\n", uint32(key), fld[1], fld[7], fld[2], fld[3], fld[6])
	}
	fmt.Println()
	return 0
}

// pgrep PATTERN prints the pids (other than its own) whose name matches PATTERN; status 1
// if none does, like procps and busybox.
func pgrep(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: pgrep PATTERN")
		return 2
	}
	re, err := regexp.Compile(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgrep: %v\n", err)
		return 2
	}
	self := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	found := 1
	for _, d := range dirs {
		pid := filepath.Base(d)
		if pid == self {
			continue
		}
		comm, err := os.ReadFile(d + "/comm")
		if err != nil {
			continue
		}
		if re.MatchString(strings.TrimSuffix(string(comm), "\n")) {
			fmt.Println(pid)
			found = 0
		}
	}
	return found
}
