// Command gotarget prints the entry address of targetFunction, then blocks.
package main

import (
	"fmt"
	"os"
	"reflect"
	"time"
)

//go:noinline
func targetFunction(x int) int { return x*7 + 3 }

func main() {
	fmt.Printf("%#x\n", reflect.ValueOf(targetFunction).Pointer())
	os.Stdout.Sync()
	_ = targetFunction(len(os.Args))
	for {
		time.Sleep(time.Hour) // a bare select{} would trip the deadlock detector
	}
}
