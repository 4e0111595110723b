package httpapi

import _ "embed"

// OpenAPI is the API description, kept in step with routes.go by a test.
//
//go:embed openapi.json
var OpenAPI []byte
