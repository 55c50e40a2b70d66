package readmetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Program is a snippet made a program by Wrap.
type Program struct {
	Snippet
	Name   string // its package's (and binary's) name: "l42" for the snippet at line 42
	Source []byte
}

// NewProgram wraps s, with code (s.Code, or a changed copy of it) as the snippet, for file.
func NewProgram(s Snippet, code, file string) Program {
	return Program{Snippet: s, Name: fmt.Sprintf("l%d", s.Line), Source: Wrap(code, file, s.Line)}
}

// Go runs the go command on programs that exist only in an overlay: each program is a
// package of the module whose directory is not on disk, so that it may import the module's
// internal packages, and nothing is written into the source tree.
type Go struct {
	Tool      string // the go command
	ModuleDir string // absolute directory of go.mod
	WorkDir   string // the programs' sources, the overlay file and the binaries go here
}

// pkgPath is the directory, relative to the module, that the overlay gives program name.
func pkgPath(name string) string { return filepath.Join("internal", "readmetest", "snippets", name) }

// overlay writes the programs' sources and the overlay file, and returns the overlay file
// and the packages' patterns.
func (g *Go) overlay(progs []Program) (string, []string, error) {
	src := filepath.Join(g.WorkDir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", nil, err
	}
	var ov struct{ Replace map[string]string }
	ov.Replace = map[string]string{}
	var pkgs []string
	for _, p := range progs {
		file := filepath.Join(src, p.Name+".go")
		if err := os.WriteFile(file, p.Source, 0o644); err != nil {
			return "", nil, err
		}
		ov.Replace[filepath.Join(g.ModuleDir, pkgPath(p.Name), "main.go")] = file
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkgPath(p.Name)))
	}
	b, err := json.Marshal(ov)
	if err != nil {
		return "", nil, err
	}
	file := filepath.Join(g.WorkDir, "overlay.json")
	return file, pkgs, os.WriteFile(file, b, 0o644)
}

// run runs the go command in the module and returns its standard output; an error carries
// its standard error, where the compiler writes.
func (g *Go) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, g.Tool, args...)
	cmd.Dir = g.ModuleDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Build compiles the programs with one `go build` and returns the path of each binary by
// program name. Compiler errors name the README.md lines.
func (g *Go) Build(ctx context.Context, progs []Program) (map[string]string, error) {
	ov, pkgs, err := g.overlay(progs)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(g.WorkDir, "bin") + string(filepath.Separator)
	if _, err := g.run(ctx, append([]string{"build", "-overlay", ov, "-o", bin}, pkgs...)...); err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, p := range progs {
		bins[p.Name] = filepath.Join(bin, p.Name)
	}
	return bins, nil
}

// Exports returns the export data file of every package the programs depend on, by import
// path, for Unchecked. After Build it only reads the build cache.
func (g *Go) Exports(ctx context.Context, progs []Program) (map[string]string, error) {
	ov, pkgs, err := g.overlay(progs)
	if err != nil {
		return nil, err
	}
	out, err := g.run(ctx, append([]string{"list", "-overlay", ov, "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.Lines(out) {
		path, file, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && file != "" {
			m[path] = file
		}
	}
	return m, nil
}
