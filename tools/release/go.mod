module github.com/signagent/signagent/tools/release

go 1.26.0

require github.com/github/go-spdx/v2 v2.8.0
