package worker

import (
	"fmt"
	"syscall"
	"time"
)

// FunctionError is an invocation's failure as the worker reports it: an
// exception the handler raised (Type is its class: "ValueError",
// "SystemExit"), or a handler the worker could not run ("ImportError",
// "HandlerNotFound", "MalformedHandlerName", "ResultNotSerializable").
type FunctionError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

func (e *FunctionError) Error() string {
	if e.Message == "" {
		return e.Type
	}
	return e.Type + ": " + e.Message
}

// TimeoutError is an invocation the worker was killed for: it ran past
// Timeout, or its context ended (Cause). errors.Is(err, ErrTimeout) holds,
// and so does errors.Is(err, Cause).
type TimeoutError struct {
	// Timeout is the request's time limit; 0 when none was set.
	Timeout time.Duration
	// Cause is the context's error when the context ended the invocation.
	Cause error
	// Log is the invocation's log up to the kill.
	Log string
}

func (e *TimeoutError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("worker: invocation stopped: %v; worker killed", e.Cause)
	}
	return fmt.Sprintf("worker: invocation timed out after %v; worker killed", e.Timeout)
}

// Unwrap gives ErrTimeout and the context's error.
func (e *TimeoutError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrTimeout, e.Cause}
	}
	return []error{ErrTimeout}
}

// CrashError is a worker that died mid-invocation (an OOM kill, a
// segfault, os._exit in the function).
type CrashError struct {
	// Signal killed the worker; 0 when it exited.
	Signal syscall.Signal
	// ExitCode is its exit status; -1 when a signal killed it.
	ExitCode int
	// Log is the invocation's whole log.
	Log string
}

func (e *CrashError) Error() string {
	if e.Signal != 0 {
		return fmt.Sprintf("worker: died mid-invocation: killed by signal %d (%v)", int(e.Signal), e.Signal)
	}
	return fmt.Sprintf("worker: died mid-invocation: exit status %d", e.ExitCode)
}
