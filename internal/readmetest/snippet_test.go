package readmetest_test

import (
	"context"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/lightq/lightq/internal/readmetest"
)

func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   string
		want []readmetest.Snippet
		err  string
	}{
		{
			name: "blocks and headings",
			md:   "# Top\n\n```go\na := 1\n```\n\n## Next\n\ntext\n```sh\nls\n```\n```go title\nb := 2\n\nc := 3\n```\n",
			want: []readmetest.Snippet{
				{Line: 4, Heading: "Top", Code: "a := 1\n"},
				{Line: 14, Heading: "Next", Code: "b := 2\n\nc := 3\n"},
			},
		},
		{
			name: "a longer fence holds a shorter one; tildes",
			md:   "````go\nx := \"```\"\n```\ny := 1\n````\n~~~go\nz := 2\n~~~\n",
			want: []readmetest.Snippet{
				{Line: 2, Heading: "", Code: "x := \"```\"\n```\ny := 1\n"},
				{Line: 7, Heading: "", Code: "z := 2\n"},
			},
		},
		{
			name: "a heading inside a block is code",
			md:   "## A\n```sh\n# comment\n```\n```go\nv := 1\n```\n",
			want: []readmetest.Snippet{{Line: 6, Heading: "A", Code: "v := 1\n"}},
		},
		{
			name: "golang is not go",
			md:   "```golang\nv := 1\n```\n```\nw := 2\n```\n",
		},
		{
			name: "unclosed",
			md:   "```go\nv := 1\n",
			err:  "never closed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readmetest.Extract([]byte(tc.md))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      string
		imports   []string // in the program's import block
		noImports []string
		contains  []string // in the program
	}{
		{
			name:      "the packages the snippet uses",
			code:      "c, err := client.Dial(ctx, \"x\", client.Options{})\nif err != nil {\n\tlog.Fatal(err)\n}\n_ = c\n_ = wire.KindDurable\n",
			imports:   []string{`"github.com/lightq/lightq/client"`, `"github.com/lightq/lightq/wire"`, `"log"`},
			noImports: []string{`"errors"`, `"strings"`},
		},
		{
			name:      "a local variable named like a package",
			code:      "strings := []string{\"a\"}\nfmt.Println(len(strings))\n",
			noImports: []string{`"strings"`},
		},
		{
			name: "deferred calls without arguments are checked at run time",
			code: "defer conn.Close()\ndefer os.Remove(\"x\")\ndefer func() { recover() }()\ndefer recover()\n",
			contains: []string{
				"//line README.md:10\ndefer readmeDeferred(10, conn.Close)\n",
				"defer os.Remove(\"x\")\n",
				"defer readmeDeferred(12, func() { recover() })\n",
				"defer recover()\n",
			},
		},
		{
			name:     "code that does not parse is kept for the compiler",
			code:     "x := (\n",
			contains: []string{"//line README.md:10\nx := (\n}\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := string(readmetest.Wrap(tc.code, "README.md", 10))
			imports, _, _ := strings.Cut(src[strings.Index(src, "import ("):], ")")
			for _, p := range tc.imports {
				if !strings.Contains(imports, p) {
					t.Errorf("no import %s in\n%s", p, imports)
				}
			}
			for _, p := range tc.noImports {
				if strings.Contains(imports, p) {
					t.Errorf("import %s in\n%s", p, imports)
				}
			}
			for _, s := range tc.contains {
				if !strings.Contains(src, s) {
					t.Errorf("no %q in\n%s", s, src)
				}
			}
		})
	}
}

// TestUnchecked checks the finder of unchecked errors on snippets that use the standard
// library, each expecting its findings as "line: message" (the snippet starts at line 10).
func TestUnchecked(t *testing.T) {
	cases := []struct {
		name string
		code string
		want []string
	}{
		{
			name: "checked errors",
			code: `f, err := os.Open(os.DevNull)
if err != nil {
	log.Fatal(err)
}
defer f.Close()
if err := f.Sync(); err != nil {
	log.Print(err)
}
n, err := f.Write(nil)
fmt.Println(n, err)
err = errors.Join(err, nil)
if err != nil {
	return
}
do := func(cb func(error)) { cb(nil) }
do(func(err error) { fmt.Println(err) })
`,
		},
		{
			name: "a dropped call result",
			code: "os.Remove(\"x\")\ngo os.Remove(\"y\")\ndefer os.Remove(\"z\")\nfmt.Println(\"printing is not checked\")\nfmt.Fprintln(os.Stderr, \"writing to a file is\")\n",
			want: []string{
				"10: the error of os.Remove is not checked",
				"11: the error of go os.Remove is dropped",
				"12: the error of defer os.Remove is dropped: defer a function literal that checks it",
				"14: the error of fmt.Fprintln is not checked",
			},
		},
		{
			name: "errors assigned to _",
			code: "f, _ := os.Open(os.DevNull)\n_ = f.Close()\nvar n int\nn, _ = fmt.Println()\n_ = n\n",
			want: []string{"10: an error is assigned to _", "11: an error is assigned to _", "13: an error is assigned to _"},
		},
		{
			name: "an error overwritten or never read",
			code: "err := os.Remove(\"x\")\nerr = os.Remove(\"y\")\nif err != nil {\n\tlog.Print(err)\n}\nerr = os.Remove(\"z\")\nfor range 2 {\n\terr := os.Remove(\"w\")\n\t_ = err\n\terr = os.Remove(\"v\")\n}\n",
			want: []string{
				"10: the error assigned to err is overwritten at line 11 before it is checked",
				"15: the error assigned to err is never checked",
				"18: an error is assigned to _",
				"19: the error assigned to err is never checked",
			},
		},
		{
			name: "a redeclaring short variable declaration",
			code: "a, err := os.Open(os.DevNull)\nb, err := os.Open(os.DevNull)\nif err != nil {\n\tlog.Fatal(err)\n}\nfmt.Println(a, b)\n",
			want: []string{"10: the error assigned to err is overwritten at line 11 before it is checked"},
		},
		{
			name: "callbacks that ignore their error",
			code: "do := func(cb func(int, error)) { cb(0, nil) }\ndo(func(n int, err error) { fmt.Println(n) })\ndo(func(int, error) {})\ndo(func(_ int, _ error) {})\n",
			want: []string{
				"11: the error parameter err is never checked",
				"12: the error parameter of this function has no name: it is never checked",
				"13: the error parameter _ is never checked",
			},
		},
	}
	progs := make([]readmetest.Program, len(cases))
	for i, tc := range cases {
		progs[i] = readmetest.NewProgram(readmetest.Snippet{Line: 10, Code: tc.code}, tc.code, "README.md")
		progs[i].Name = fmt.Sprintf("case%d", i)
	}
	g := &readmetest.Go{Tool: goTool(t), ModuleDir: moduleDir(t), WorkDir: t.TempDir()}
	exports, err := g.Exports(context.Background(), progs)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			found, err := readmetest.Unchecked(progs[i].Source, exports)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range found {
				if f.Pos.Filename != "README.md" {
					t.Errorf("finding outside the snippet: %v", f)
				}
				got = append(got, fmt.Sprintf("%d: %s", f.Pos.Line, f.Msg))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestBuildAndRun checks what a reader of a failure sees: the README.md line of a compile
// error, and of a deferred call whose error was not nil.
func TestBuildAndRun(t *testing.T) {
	g := &readmetest.Go{Tool: goTool(t), ModuleDir: moduleDir(t), WorkDir: t.TempDir()}
	deferred := readmetest.Snippet{Line: 20, Code: "f, err := os.Open(os.DevNull)\nif err != nil {\n\tlog.Fatal(err)\n}\ndefer f.Close()\nif err := f.Close(); err != nil {\n\tlog.Fatal(err)\n}\nfmt.Println(\"closed\")\n"}
	bins, err := g.Build(context.Background(), []readmetest.Program{readmetest.NewProgram(deferred, deferred.Code, "README.md")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bins["l20"]).CombinedOutput()
	want := "closed\nREADME.md:24: the error of a deferred call is not checked: close /dev/null: file already closed\n"
	if err == nil || string(out) != want {
		t.Errorf("deferred double Close: %v, output %q, want an exit status 1 and %q", err, out, want)
	}

	broken := readmetest.Snippet{Line: 30, Code: "c, err := client.Dial(ctx, \"x\", client.Options{})\nif err != nil {\n\tlog.Fatal(err)\n}\nc.Send(\"hello\")\n"}
	_, err = g.Build(context.Background(), []readmetest.Program{readmetest.NewProgram(broken, broken.Code, "README.md")})
	if err == nil || !strings.Contains(err.Error(), "README.md:34: c.Send undefined") {
		t.Errorf("a compile error: %v, want one at README.md:34", err)
	}
}
