// Package gctest tests chunk garbage collection end to end: metadata
// nodes (internal/metanode, where the collector runs) and chunk servers
// (internal/chunkserver) in one process. It lives apart from both because
// neither may import the other.
package gctest
