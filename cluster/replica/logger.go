package replica

import "fmt"

// LogfLogger is a raft.Logger on a printf-style function: raft's warnings and errors, and
// with Verbose its info lines (elections, membership changes), go to Logf prefixed "raft: ";
// its debug lines go nowhere. Fatal and Panic panic, as raft requires. A nil Logf drops
// everything else (Config.Logger's default). Safe from any goroutine when Logf is.
type LogfLogger struct {
	Logf    func(format string, args ...any)
	Verbose bool
}

func (l LogfLogger) printf(format string, v ...any) {
	if l.Logf != nil {
		l.Logf("raft: "+format, v...)
	}
}

func (LogfLogger) Debug(...any)          {}
func (LogfLogger) Debugf(string, ...any) {}

func (l LogfLogger) Info(v ...any) {
	if l.Verbose {
		l.printf("%s", fmt.Sprint(v...))
	}
}

func (l LogfLogger) Infof(f string, v ...any) {
	if l.Verbose {
		l.printf(f, v...)
	}
}

func (l LogfLogger) Warning(v ...any)            { l.printf("%s", fmt.Sprint(v...)) }
func (l LogfLogger) Warningf(f string, v ...any) { l.printf(f, v...) }
func (l LogfLogger) Error(v ...any)              { l.printf("%s", fmt.Sprint(v...)) }
func (l LogfLogger) Errorf(f string, v ...any)   { l.printf(f, v...) }
func (LogfLogger) Fatal(v ...any)                { panic(fmt.Sprint(v...)) }
func (LogfLogger) Fatalf(f string, v ...any)     { panic(fmt.Sprintf(f, v...)) }
func (LogfLogger) Panic(v ...any)                { panic(fmt.Sprint(v...)) }
func (LogfLogger) Panicf(f string, v ...any)     { panic(fmt.Sprintf(f, v...)) }
