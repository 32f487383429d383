// Package tools is the home of oncerun's tool registry: each tool's name,
// argument schema, effect class (read, natural, keyed, external), approval
// rule, retention window and paired read.
//
// The package holds no tool yet; internal/shop has the business writes the
// demo tools will make (credits by natural key, order notes by key).
package tools
