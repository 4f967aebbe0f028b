// Package logformat sets how meshlet logs: klog's text, or the JSON of
// Kubernetes' components (component-base's logger: one object per line,
// "ts", "caller", "msg", "v" and the key/value pairs), which log
// pipelines parse without patterns.
package logformat

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"go.uber.org/zap/zapcore"
	"k8s.io/component-base/logs/api/v1"
	logsjson "k8s.io/component-base/logs/json"
	"k8s.io/klog/v2"
)

// Formats are the values of --log-format.
var Formats = []string{"text", "json"}

var (
	mu      sync.Mutex
	control *v1.RuntimeControl // the JSON logger's, once installed
)

// Apply makes klog log in format, at verbosity v. Call it once, before
// anything logs.
func Apply(format string, v int) error {
	switch format {
	case "", "text":
	case "json":
		logger, c := logsjson.NewJSONLogger(v1.VerbosityLevel(v), zapcore.Lock(os.Stderr), nil, nil)
		klog.SetLoggerWithOptions(logger, klog.ContextualLogger(true), klog.FlushLogger(c.Flush))
		mu.Lock()
		control = &c
		mu.Unlock()
	default:
		return fmt.Errorf("--log-format=%q: want text or json", format)
	}
	return SetVerbosity(v)
}

// SetVerbosity sets the log verbosity (klog's -v, and the JSON logger's
// when it is in use): it may change while meshlet runs.
func SetVerbosity(v int) error {
	var l klog.Level
	if err := l.Set(strconv.Itoa(v)); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if control != nil && control.SetVerbosityLevel != nil {
		return control.SetVerbosityLevel(uint32(v))
	}
	return nil
}
