// Package readmetest compiles and checks the Go snippets of README.md, so that what a reader
// copies from it builds and runs: Extract finds the ```go blocks, Wrap makes each a program
// (package main, the imports it uses, and the variables README assumes but does not declare),
// Build compiles them with `go build -overlay` (nothing is written into the source tree),
// and Unchecked reports errors a snippet drops. The test of this package runs the programs
// against a real broker and checks that each did what README says.
//
// Every line of a snippet keeps its README.md line number in the program (a //line
// directive), so compiler errors, Unchecked's findings and the run-time check of deferred
// calls all name the line of README.md to fix.
//
// Nothing here is safe for concurrent use unless stated; the package is for tests only.
package readmetest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// Snippet is one ```go block of a Markdown file.
type Snippet struct {
	Line    int    // line of the block's first code line (1-based)
	Heading string // text of the closest heading above the block ("" before any)
	Code    string // the lines between the fences, each ending in "\n"
}

// Extract returns the ```go blocks of a Markdown document in order. A block that is not
// closed is an error, since README would render the rest of the file as code.
func Extract(md []byte) ([]Snippet, error) {
	var (
		out     []Snippet
		heading string
		cur     *Snippet
		fence   string // the opening fence of the block being read, "" outside blocks
		code    strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "" {
				if cur != nil {
					cur.Code = code.String()
					out = append(out, *cur)
					cur = nil
				}
				fence = ""
				continue
			}
			if cur != nil {
				code.WriteString(line)
				code.WriteByte('\n')
			}
			continue
		}
		if f := openingFence(trimmed); f != "" {
			fence = f
			if info := strings.Fields(trimmed[len(f):]); len(info) > 0 && info[0] == "go" {
				cur = &Snippet{Line: n + 1, Heading: heading}
				code.Reset()
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if fence != "" {
		return nil, fmt.Errorf("a code block opened with %s is never closed", fence)
	}
	return out, nil
}

// openingFence returns the fence (three or more backticks or tildes) that line opens with, or "".
func openingFence(line string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(line) && line[n] == c {
			n++
		}
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

// Assumed is what README says its snippets assume without declaring it; the program's
// wrapper declares it, not the snippet.
const Assumed = `// What README.md's snippets assume and do not declare: ctx, the program's context, which ends
// on SIGINT (signal.NotifyContext) or after a minute, and adminPassword, the broker's admin
// password, from the environment (AdminPasswordEnv).
var (
	ctx           context.Context
	adminPassword = os.Getenv("` + AdminPasswordEnv + `")
)
`

// AdminPasswordEnv names the environment variable the programs read adminPassword from.
const AdminPasswordEnv = "READMETEST_ADMIN_PASSWORD"

// wrapperImports are the imports of the wrapper's own code.
var wrapperImports = []string{"context", "fmt", "os", "os/signal", "reflect", "time"}

// knownImports maps the package names a snippet may use to their import paths.
var knownImports = map[string]string{
	"bytes":   "bytes",
	"client":  "github.com/lightq/lightq/client",
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"log":     "log",
	"os":      "os",
	"signal":  "os/signal",
	"slices":  "slices",
	"strings": "strings",
	"sync":    "sync",
	"time":    "time",
	"wire":    "github.com/lightq/lightq/wire",
}

// Wrap makes code, a snippet's statements, the body of a program's function, and returns
// the program's source. The snippet's lines keep their README.md line numbers (from line,
// file name) through a //line directive. The imports are those of the packages in
// knownImports that code refers to. A deferred call with no arguments, whose error the
// language drops, goes through readmeDeferred, which fails the program when it returns a
// non-nil error. Code that does not parse is wrapped as it is, so that the compiler reports
// the syntax error at its README.md line.
func Wrap(code string, file string, line int) []byte {
	src, off := program(code, file, line, wrapperImports)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", src, parser.SkipObjectResolution)
	if err != nil {
		return src
	}
	code = rewriteDefers(fset, f, code, off)
	src, _ = program(code, file, line, wrapperImports)
	f, err = parser.ParseFile(fset, "main.go", src, 0) // resolve objects: imports stay unresolved
	if err != nil {
		return src
	}
	imports := slices.Clone(wrapperImports)
	for _, id := range f.Unresolved {
		if path, ok := knownImports[id.Name]; ok && !slices.Contains(imports, path) {
			imports = append(imports, path)
		}
	}
	src, _ = program(code, file, line, imports)
	return src
}

// program writes the wrapper around code and returns it with the offset of code in it.
func program(code, file string, line int, imports []string) ([]byte, int) {
	var b bytes.Buffer
	b.WriteString("// A program made by internal/readmetest from a snippet of README.md.\n\npackage main\n\nimport (\n")
	for _, p := range slices.Sorted(slices.Values(imports)) {
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	b.WriteString(")\n\n")
	b.WriteString(Assumed)
	b.WriteString(`
func main() {
	var stop, cancel context.CancelFunc
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt)
	ctx, cancel = context.WithTimeout(ctx, time.Minute)
	snippet()
	cancel()
	stop()
}

// readmeDeferred calls f, a deferred call of the snippet, and fails the program when f
// returns a non-nil error, which the snippet's defer statement drops.
func readmeDeferred(line int, f any) {
	for _, out := range reflect.ValueOf(f).Call(nil) {
		if err, ok := out.Interface().(error); ok && err != nil {
			fmt.Fprintf(os.Stderr, "` + file + `:%d: the error of a deferred call is not checked: %v\n", line, err)
			os.Exit(1)
		}
	}
}

// snippet is the snippet; its lines keep their numbers in README.md.
func snippet() {
`)
	// A //line directive must start its line; it numbers the line after it.
	fmt.Fprintf(&b, "//line %s:%d\n", file, line)
	off := b.Len()
	b.WriteString(code)
	b.WriteString("}\n")
	return b.Bytes(), off
}

// rewriteDefers turns each `defer X()` of the snippet (a call without arguments) into
// `defer readmeDeferred(LINE, X)`, which evaluates X at the same moment (the defer
// statement) and checks its error at return. off is where code starts in f's source.
func rewriteDefers(fset *token.FileSet, f *ast.File, code string, off int) string {
	type edit struct {
		from, to int
		text     string
	}
	var edits []edit
	ast.Inspect(f, func(n ast.Node) bool {
		d, ok := n.(*ast.DeferStmt)
		if !ok || len(d.Call.Args) > 0 || d.Call.Ellipsis.IsValid() {
			return true
		}
		if id, ok := d.Call.Fun.(*ast.Ident); ok && slices.Contains([]string{"print", "println", "recover"}, id.Name) {
			return true // builtins are no values
		}
		from := fset.PositionFor(d.Call.Pos(), false).Offset - off
		to := fset.PositionFor(d.Call.End(), false).Offset - off
		funEnd := fset.PositionFor(d.Call.Fun.End(), false).Offset - off
		if from < 0 || to > len(code) {
			return true // the wrapper's own code
		}
		line := fset.Position(d.Pos()).Line // adjusted: the README.md line
		edits = append(edits, edit{from, to, fmt.Sprintf("readmeDeferred(%d, %s)", line, code[from:funEnd])})
		return true
	})
	for i := len(edits) - 1; i >= 0; i-- {
		e := edits[i]
		code = code[:e.from] + e.text + code[e.to:]
	}
	return code
}
