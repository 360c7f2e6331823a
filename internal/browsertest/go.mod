module github.com/holdfast-db/holdfast/internal/browsertest

go 1.26.8

require (
	github.com/chromedp/chromedp v0.23.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/holdfast-db/holdfast v0.0.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/holdfast-db/holdfast => ../..
