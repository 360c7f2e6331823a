// Package browsertest holds the tests that drive holdfast's pages in a
// real browser (headless Chromium over the DevTools protocol). It is a
// module of its own so that the browser driver stays out of holdfast's
// module graph: `make test` runs its tests after the main module's.
package browsertest
