// Package docscheck holds tests that keep the repository's documentation
// true: links_test.go fails when a relative link or image in README.md,
// CONTRIBUTING.md or docs/*.md names a file or directory that does not
// exist, or one outside the repository, and when a document mentions a
// sibling checkout (../shared) or a path of the machine it was written on
// (/work/shared); contract_test.go holds docs/contract.md to the code.
//
// The package has no code of its own, only tests, and they use the
// standard library alone:
//
//	go test ./internal/docscheck/
package docscheck
