// pulumi-language-python: the Python language host the Pulumi CLI starts for Python programs
// (`pulumi preview`, `pulumi up`, ...) and Python policy packs (`--policy-pack`).
//
// The Go module proxy does not serve Pulumi's own host
// (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 has no version there), so the
// toolchain builds this one. It speaks the LanguageRuntime gRPC service of sdk/v3 and leaves everything
// Python-specific to sdk/v3's own packages, at the version the CLI is built from:
//
//   - the virtualenv and the pip/uv/poetry toolchains: github.com/pulumi/pulumi/sdk/v3/python/toolchain;
//   - running a program: the executor script sdk/v3 ships (python/cmd/pulumi-language-python-exec), which the
//     toolchain copies next to this binary, with the arguments and environment it reads;
//   - running a policy pack: `python -u -m pulumi.policy ENGINE PACK_DIR` behind sdk/v3's PolicyProxy, which
//     hands the pack the stack's configuration.
//
// What it leaves out: debugging (attachDebugger), type checking before a run (runtime option `typechecker`
// is refused with a message), code generation (GenerateProject/Program/Package, Pack, Link, Template).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// executorName is the executor script's file name; it sits next to this binary.
const executorName = "pulumi-language-python-exec"

// bailExitCode is the exit code of a Python program that already showed the user an actionable message
// (the Python SDK's `pulumi.RunError` path): the engine is told to bail without another error.
const bailExitCode = 32

func main() {
	showVersion := flag.Bool("version", false, "print the plugin's version and exit")
	executor := flag.String("use-executor", "", "the executor script (default: next to this binary)")
	flag.String("tracing", "", "accepted for the CLI's sake; tracing is not emitted")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}
	logging.InitLogging(false, 0, false)

	exec, err := executorPath(*executor)
	if err != nil {
		cmdutil.Exit(err)
	}
	var engineAddress string
	if args := flag.Args(); len(args) > 0 {
		engineAddress = args[0]
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cancel := make(chan bool)
	go func() {
		<-ctx.Done()
		close(cancel)
	}()
	if engineAddress != "" {
		// Exit when the engine goes away, as every plugin does.
		if err := rpcutil.Healthcheck(ctx, engineAddress, 5*time.Minute, stop); err != nil {
			cmdutil.Exit(fmt.Errorf("could not start the engine health check: %w", err))
		}
	}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, newHost(exec, engineAddress))
			return nil
		},
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start the language host's gRPC server: %w", err))
	}
	// The CLI reads the port from the first line of stdout.
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		cmdutil.Exit(fmt.Errorf("the language host's gRPC server stopped: %w", err))
	}
}

// executorPath is the executor script: `given`, else the file next to this binary.
func executorPath(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("could not find this executable: %w", err)
	}
	path := filepath.Join(filepath.Dir(self), executorName)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("missing executor %s (the toolchain copies it from sdk/v3): %w", path, err)
	}
	return path, nil
}

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	exec          string
	engineAddress string
	// stopRuns ends running programs when the engine calls Cancel.
	runs     context.Context
	stopRuns context.CancelFunc
}

func newHost(exec, engineAddress string) *host {
	runs, stopRuns := context.WithCancel(context.Background())
	return &host{exec: exec, engineAddress: engineAddress, runs: runs, stopRuns: stopRuns}
}

func (h *host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.engineAddress = req.GetEngineAddress()
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

func (h *host) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	h.stopRuns()
	return &emptypb.Empty{}, nil
}

// pythonToolchain resolves the project's Python toolchain from its runtime options: `virtualenv`
// (relative to the project root) and `toolchain` (pip, poetry or uv). Plugins other than policy packs
// default to the virtualenv `venv`, as Pulumi's own host does.
func pythonToolchain(info *pulumirpc.ProgramInfo, isPlugin bool) (toolchain.Toolchain, error) {
	opts := toolchain.PythonOptions{Root: info.GetRootDirectory(), ProgramDir: info.GetProgramDirectory()}
	options := info.GetOptions().AsMap()
	if v, ok := options["virtualenv"]; ok {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("runtime option virtualenv: %v is not a string", v)
		}
		opts.Virtualenv = s
	}
	if v, ok := options["toolchain"]; ok {
		switch v {
		case "pip":
			opts.Toolchain = toolchain.Pip
		case "poetry":
			opts.Toolchain = toolchain.Poetry
		case "uv":
			opts.Toolchain = toolchain.Uv
		default:
			return nil, fmt.Errorf("runtime option toolchain: %v is not one of pip, poetry, uv", v)
		}
	}
	if v, ok := options["typechecker"]; ok {
		return nil, fmt.Errorf("runtime option typechecker: %v is not supported by this language host; "+
			"run the type checker before pulumi", v)
	}
	if isPlugin && opts.Virtualenv == "" && (opts.Toolchain == toolchain.Pip || opts.Toolchain == toolchain.Auto) {
		opts.Virtualenv = "venv"
	}
	return toolchain.ResolveToolchain(opts)
}

// pluginPackagesScript prints, for every installed distribution whose top-level package holds a
// pulumi-plugin.json, the distribution's name and version and that file's contents (JSON lines).
const pluginPackagesScript = `
import importlib.metadata, json, os, sys
for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    for top in (dist.read_text("top_level.txt") or name.replace("-", "_")).split():
        path = os.path.join(str(dist.locate_file(top)), "pulumi-plugin.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                plugin = json.load(f)
            print(json.dumps({"name": name, "version": dist.version, "plugin": plugin}))
            break
`

// pluginPackage is one line of pluginPackagesScript's output.
type pluginPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Plugin  struct {
		Resource bool   `json:"resource"`
		Name     string `json:"name"`
		Version  string `json:"version"`
		Server   string `json:"server"`
	} `json:"plugin"`
}

// GetRequiredPackages names the resource plugin of each installed Pulumi package (its
// pulumi-plugin.json with `resource: true`), so the engine checks they are all present before it runs
// the program.
func (h *host) GetRequiredPackages(
	ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	tc, err := pythonToolchain(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", pluginPackagesScript)
	if err != nil {
		return nil, err
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the Pulumi packages of the virtualenv: %w%s", err, stderrOf(err))
	}
	var packages []*pulumirpc.PackageDependency
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var pkg pluginPackage
		if err := json.Unmarshal([]byte(line), &pkg); err != nil {
			return nil, fmt.Errorf("reading a pulumi-plugin.json: %w", err)
		}
		if dep := packageDependency(pkg); dep != nil {
			packages = append(packages, dep)
		}
	}
	return &pulumirpc.GetRequiredPackagesResponse{Packages: packages}, nil
}

// packageDependency is the resource plugin a package needs, or nil (`resource: false`, or a version that
// names no plugin release). The plugin's name and version default to the package's, without `pulumi-`.
func packageDependency(pkg pluginPackage) *pulumirpc.PackageDependency {
	if !pkg.Plugin.Resource {
		return nil
	}
	name := pkg.Plugin.Name
	if name == "" {
		name = strings.TrimPrefix(pkg.Name, "pulumi-")
	}
	v := pkg.Plugin.Version
	if v == "" {
		v = pkg.Version
		if !isPlainRelease(v) {
			return nil
		}
	}
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return &pulumirpc.PackageDependency{Name: name, Version: v, Kind: "resource", Server: pkg.Plugin.Server}
}

// isPlainRelease is true for N.N.N (a Python package version that is also the plugin's).
func isPlainRelease(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 32); err != nil {
			return false
		}
	}
	return true
}

func (h *host) GetProgramDependencies(
	ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := pythonToolchain(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	deps, err := tc.ListPackages(ctx, req.GetTransitiveDependencies())
	if err != nil {
		return nil, fmt.Errorf("listing the program's Python packages: %w", err)
	}
	result := make([]*pulumirpc.DependencyInfo, 0, len(deps))
	for _, d := range deps {
		result = append(result, &pulumirpc.DependencyInfo{Name: d.Name, Version: d.Version})
	}
	return &pulumirpc.GetProgramDependenciesResponse{Dependencies: result}, nil
}

func (h *host) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := pythonToolchain(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	info, err := tc.About(ctx)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{Executable: info.PythonExecutable, Version: info.PythonVersion.String()}, nil
}

// InstallDependencies creates the virtualenv where missing and installs the project's requirements
// (`pulumi install`).
func (h *host) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest, server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	tc, err := pythonToolchain(req.GetInfo(), req.GetIsPlugin())
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeInstallDependenciesStreams(server, req.GetIsTerminal())
	if err != nil {
		return err
	}
	defer closer.Close()
	fmt.Fprintln(stdout, "Installing dependencies...")
	dir := req.GetInfo().GetProgramDirectory()
	if err := tc.InstallDependencies(server.Context(), dir, req.GetUseLanguageVersionTools(), true, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "Finished installing dependencies")
	return closer.Close()
}

// Run runs the program through the executor script with the virtualenv's Python: the engine's
// addresses and the run's settings as arguments, the stack's configuration and its secret keys as
// PULUMI_CONFIG and PULUMI_CONFIG_SECRET_KEYS (JSON).
func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	if h.engineAddress == "" {
		return nil, errors.New("no engine address: the CLI passes it on the command line or in Handshake")
	}
	if req.GetAttachDebugger() {
		return &pulumirpc.RunResponse{Error: "attaching a debugger is not supported by this language host"}, nil
	}
	tc, err := pythonToolchain(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	runCtx, stopRun := context.WithCancel(h.runs)
	defer stopRun()
	context.AfterFunc(ctx, stopRun)
	cmd, err := tc.Command(runCtx, append([]string{h.exec}, executorArgs(req, h.engineAddress)...)...)
	if err != nil {
		return nil, err
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	env, err := configEnv(req)
	if err != nil {
		return nil, err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, env...)

	err = cmd.Run()
	if err == nil {
		return &pulumirpc.RunResponse{}, nil
	}
	// The engine prints what the program wrote; make sure it all reached it.
	_ = os.Stdout.Sync()
	_ = os.Stderr.Sync()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("could not run the program's executor: %v", err)}, nil
	}
	if exitErr.ExitCode() == bailExitCode {
		return &pulumirpc.RunResponse{Bail: true}, nil
	}
	return &pulumirpc.RunResponse{Error: fmt.Sprintf("program exited with non-zero exit code: %d", exitErr.ExitCode())}, nil
}

// executorArgs is the executor script's command line: `--name value` for each setting that is set,
// then the entry point and the program's own arguments.
func executorArgs(req *pulumirpc.RunRequest, engineAddress string) []string {
	var args []string
	add := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", engineAddress)
	add("project", req.GetProject())
	add("root_directory", req.GetInfo().GetRootDirectory())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", strconv.FormatBool(req.GetDryRun()))
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	add("organization", req.GetOrganization())
	args = append(args, req.GetInfo().GetEntryPoint())
	return append(args, req.GetArgs()...)
}

// configEnv is the stack's configuration for the program: PULUMI_CONFIG (a JSON map) and
// PULUMI_CONFIG_SECRET_KEYS (a JSON list, `[]` when none).
func configEnv(req *pulumirpc.RunRequest) ([]string, error) {
	var env []string
	if cfg := req.GetConfig(); cfg != nil {
		text, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("serializing the configuration: %w", err)
		}
		env = append(env, "PULUMI_CONFIG="+string(text))
	}
	keys := req.GetConfigSecretKeys()
	if keys == nil {
		keys = []string{}
	}
	text, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("serializing the secret configuration keys: %w", err)
	}
	return append(env, "PULUMI_CONFIG_SECRET_KEYS="+string(text)), nil
}

// RunPlugin runs a Python plugin. A policy pack (kind analyzer) runs as `python -u -m pulumi.policy
// ENGINE... PACK_DIR` in the pack's directory, behind sdk/v3's PolicyProxy: the engine first sends the
// stack's configuration to the proxy, which starts the pack with it in its environment and then forwards
// every call. Any other plugin runs its directory's __main__.py.
func (h *host) RunPlugin(req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer) error {
	ctx := server.Context()
	analyzer := req.GetKind() == string(apitype.AnalyzerPlugin)
	tc, err := pythonToolchain(req.GetInfo(), !analyzer)
	if err != nil {
		return err
	}
	dir := req.GetInfo().GetProgramDirectory()
	var args []string
	if analyzer {
		args = append(append([]string{"-u", "-m", "pulumi.policy"}, req.GetArgs()...), dir)
	} else {
		if _, err := os.Stat(filepath.Join(dir, "__main__.py")); err != nil {
			return fmt.Errorf("plugin %s has no __main__.py: %w", dir, err)
		}
		args = append([]string{dir}, req.GetArgs()...)
	}
	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	if !analyzer {
		cmd.Dir = req.GetPwd()
		cmd.Env = append(cmd.Env, req.GetEnv()...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		return exitStatus(server, cmd.Run(), closer)
	}

	cmd.Dir = dir
	proxy, proxyStdout, err := sdk.NewPolicyProxy(ctx, stdout)
	if err != nil {
		return fmt.Errorf("could not start the policy pack proxy: %w", err)
	}
	stack, err := proxy.AwaitConfiguration(ctx)
	if err != nil {
		return fmt.Errorf("could not get the stack's configuration for the policy pack: %w", err)
	}
	if stack != nil {
		env, err := policyEnv(stack)
		if err != nil {
			return err
		}
		cmd.Env = append(cmd.Env, env...)
	}
	cmd.Env = append(cmd.Env, req.GetEnv()...)
	cmd.Stdout, cmd.Stderr = proxyStdout, stderr
	if err := cmd.Start(); err != nil {
		proxy.Abort(err)
		return fmt.Errorf("could not start the policy pack: %w", err)
	}
	return exitStatus(server, proxy.Attach(ctx, cmd), closer)
}

// policyEnv is the stack a policy pack runs for, in the variables pulumi.policy reads.
func policyEnv(stack *pulumirpc.AnalyzerStackConfigureRequest) ([]string, error) {
	var env []string
	add := func(name, value string) {
		if value != "" {
			env = append(env, name+"="+value)
		}
	}
	add("PULUMI_ORGANIZATION", stack.GetOrganization())
	add("PULUMI_PROJECT", stack.GetProject())
	add("PULUMI_STACK", stack.GetStack())
	add("PULUMI_DRY_RUN", strconv.FormatBool(stack.GetDryRun()))
	if cfg := stack.GetConfig(); cfg != nil {
		text, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("serializing the stack's configuration for the policy pack: %w", err)
		}
		add("PULUMI_CONFIG", string(text))
	}
	return env, nil
}

// exitStatus reports how a plugin process ended: its exit code when it exited, else the error.
func exitStatus(server pulumirpc.LanguageRuntime_RunPluginServer, err error, closer io.Closer) error {
	if err == nil {
		return closer.Close()
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok {
			return server.Send(&pulumirpc.RunPluginResponse{
				Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(status.ExitStatus())},
			})
		}
	}
	return fmt.Errorf("the plugin's process: %w", err)
}

// stderrOf is the captured standard error of a failed command, as a suffix for its error.
func stderrOf(err error) string {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && len(exitErr.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(exitErr.Stderr))
	}
	return ""
}
