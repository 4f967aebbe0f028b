// Package netnstest creates throwaway network namespaces for tests: real
// kernel namespaces, bind-mounted under the test's temp dir and removed when
// the test ends. Linux only; the tests that use it need root.
package netnstest
