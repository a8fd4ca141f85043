// Package e2e holds end-to-end tests that run the real govfs binary as
// separate processes on 127.0.0.1 and kill them with SIGKILL. The binary is
// built once per test run in TestMain.
package e2e
