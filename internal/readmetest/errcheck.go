package readmetest

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"slices"
)

// Finding is an error that a snippet leaves unchecked, at its README.md position.
type Finding struct {
	Pos token.Position
	Msg string
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.Pos.Filename, f.Pos.Line, f.Msg) }

// Unchecked type-checks a program made by Wrap, importing packages from the compiler's
// export data (exports maps an import path to its file, as `go list -export` gives it), and
// reports the errors its snippet leaves unchecked, the way a real program must not:
//
//   - a call whose error result is dropped: a call statement (fmt.Print, Printf and Println
//     excepted), a go statement, a defer statement with arguments (one without goes through
//     readmeDeferred, checked at run time), or an error assigned to _;
//   - an error assigned to a variable that is then assigned again before anything reads it,
//     or that nothing reads after the assignment in the variable's own block;
//   - a function literal's error parameter (a callback's outcome) that its body never reads.
//
// Reading the variable counts as checking it. The compiler already refuses a variable that
// is never read at all.
func Unchecked(src []byte, exports map[string]string) ([]Finding, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	}
	c := &checker{fset: fset, info: &types.Info{
		Types:  map[ast.Expr]types.TypeAndValue{},
		Defs:   map[*ast.Ident]types.Object{},
		Uses:   map[*ast.Ident]types.Object{},
		Scopes: map[ast.Node]*types.Scope{},
	}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	if _, err := conf.Check("main", fset, []*ast.File{f}, c.info); err != nil {
		return nil, err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "snippet" {
			c.check(fd)
			slices.SortStableFunc(c.found, func(a, b Finding) int { return a.Pos.Offset - b.Pos.Offset })
			return c.found, nil
		}
	}
	return nil, fmt.Errorf("no func snippet in the program")
}

type checker struct {
	fset  *token.FileSet
	info  *types.Info
	found []Finding
}

var errorType = types.Universe.Lookup("error").Type()

func isError(t types.Type) bool { return t != nil && types.Identical(t, errorType) }

func (c *checker) report(n ast.Node, format string, args ...any) {
	c.found = append(c.found, Finding{Pos: c.fset.Position(n.Pos()), Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) check(fd *ast.FuncDecl) {
	// A function's body has no scope of its own in types.Info: its variables are in the
	// scope of the function's type.
	bodyScope := map[*ast.BlockStmt]*types.Scope{fd.Body: c.info.Scopes[fd.Type]}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ExprStmt:
			if call, ok := n.X.(*ast.CallExpr); ok && c.returnsError(call) && !c.printCall(call) {
				c.report(n, "the error of %s is not checked", types.ExprString(call.Fun))
			}
		case *ast.GoStmt:
			if c.returnsError(n.Call) {
				c.report(n, "the error of go %s is dropped", types.ExprString(n.Call.Fun))
			}
		case *ast.DeferStmt:
			if c.returnsError(n.Call) {
				c.report(n, "the error of defer %s is dropped: defer a function literal that checks it", types.ExprString(n.Call.Fun))
			}
		case *ast.AssignStmt:
			c.blankErrors(n)
		case *ast.FuncLit:
			c.errorParams(n)
			bodyScope[n.Body] = c.info.Scopes[n.Type]
		case *ast.BlockStmt:
			scope, ok := bodyScope[n]
			if !ok {
				scope = c.info.Scopes[n]
			}
			c.block(n.List, scope)
		case *ast.CaseClause:
			c.block(n.Body, c.info.Scopes[n])
		case *ast.CommClause:
			c.block(n.Body, c.info.Scopes[n])
		}
		return true
	})
}

// returnsError says whether call has an error among its results.
func (c *checker) returnsError(call *ast.CallExpr) bool {
	switch t := c.info.TypeOf(call).(type) {
	case *types.Tuple:
		for v := range t.Variables() {
			if isError(v.Type()) {
				return true
			}
		}
		return false
	default:
		return isError(t)
	}
}

// printCall says whether call is fmt.Print, Printf or Println, whose errors (of writing to
// standard output) programs do not check.
func (c *checker) printCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	fn, ok := c.info.Uses[sel.Sel].(*types.Func)
	return ok && fn.Pkg() != nil && fn.Pkg().Path() == "fmt" && slices.Contains([]string{"Print", "Printf", "Println"}, fn.Name())
}

// blankErrors reports errors that an assignment gives to _.
func (c *checker) blankErrors(as *ast.AssignStmt) {
	var types_ []types.Type // the assigned values' types, one per left-hand side
	if len(as.Rhs) == 1 && len(as.Lhs) > 1 {
		if t, ok := c.info.TypeOf(as.Rhs[0]).(*types.Tuple); ok {
			for v := range t.Variables() {
				types_ = append(types_, v.Type())
			}
		}
	} else {
		for _, r := range as.Rhs {
			types_ = append(types_, c.info.TypeOf(r))
		}
	}
	for i, l := range as.Lhs {
		if id, ok := l.(*ast.Ident); ok && id.Name == "_" && i < len(types_) && isError(types_[i]) {
			c.report(id, "an error is assigned to _")
		}
	}
}

// errorParams reports a function literal's error parameters that its body never reads.
func (c *checker) errorParams(fl *ast.FuncLit) {
	for _, field := range fl.Type.Params.List {
		if !isError(c.info.TypeOf(field.Type)) {
			continue
		}
		if len(field.Names) == 0 {
			c.report(field, "the error parameter of this function has no name: it is never checked")
		}
		for _, name := range field.Names {
			obj := c.info.Defs[name]
			if name.Name == "_" || obj == nil || !c.refers(fl.Body, obj) {
				c.report(name, "the error parameter %s is never checked", name.Name)
			}
		}
	}
}

// block reports, in one statement list, errors assigned to a variable that is assigned
// again before it is read, or never read again although its scope (scope) ends with the list.
func (c *checker) block(list []ast.Stmt, scope *types.Scope) {
	for i, s := range list {
		as, ok := s.(*ast.AssignStmt)
		if !ok {
			continue
		}
		for _, l := range as.Lhs {
			id, ok := l.(*ast.Ident)
			if !ok || id.Name == "_" {
				continue
			}
			v, ok := c.info.ObjectOf(id).(*types.Var)
			if !ok || !isError(v.Type()) {
				continue
			}
			next, writeOnly := c.nextUse(list[i+1:], v)
			switch {
			case next == nil && scope != nil && v.Parent() == scope:
				c.report(id, "the error assigned to %s is never checked", id.Name)
			case next != nil && writeOnly:
				c.report(id, "the error assigned to %s is overwritten at line %d before it is checked", id.Name, c.fset.Position(next.Pos()).Line)
			}
		}
	}
}

// nextUse finds the first statement of list that refers to v, and says whether it only
// assigns to v (as a left-hand side of an assignment) without reading it.
func (c *checker) nextUse(list []ast.Stmt, v *types.Var) (ast.Stmt, bool) {
	for _, s := range list {
		if !c.refers(s, v) {
			continue
		}
		as, ok := s.(*ast.AssignStmt)
		if !ok {
			return s, false
		}
		for _, r := range as.Rhs {
			if c.refers(r, v) {
				return s, false
			}
		}
		for _, l := range as.Lhs {
			if id, ok := l.(*ast.Ident); !ok && c.refers(l, v) {
				return s, false // v inside an index or selector: read
			} else if ok && c.info.ObjectOf(id) == v {
				return s, true
			}
		}
		return s, false
	}
	return nil, false
}

// refers says whether n mentions obj.
func (c *checker) refers(n ast.Node, obj types.Object) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && c.info.ObjectOf(id) == obj {
			found = true
		}
		return !found
	})
	return found
}
