// Command loyalty-dev is the loyalty deployment's dev stack: oncerun's
// development command line (dev, demo, the sandboxes, and every production
// command) with the module's award_points tool.
//
//	go build -o loyalty-dev ./dev && ./loyalty-dev dev
package main

import (
	"example.com/loyalty/points"

	"github.com/oncerun/oncerun/starter/oncerundev"
)

func main() { oncerundev.Main(points.Options()) }
