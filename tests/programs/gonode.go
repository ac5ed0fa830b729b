// gonode: a small Go program for the tests of Go support (function names from .gopclntab).
//
//	gonode calls N [SLEEP_MS]: calls main.storeSnapshot N times (sleeping between calls),
//	each writing snapshot-I in the working directory, then prints "done" and exits.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

type store struct{ dir string }

//go:noinline
func (s *store) storeSnapshot(i int) error {
	return os.WriteFile(fmt.Sprintf("%s/snapshot-%d", s.dir, i), []byte("snapshot\n"), 0o644)
}

//go:noinline
func tracerdTestMarker(i int) int { return i * 2 }

func main() {
	if len(os.Args) < 3 || os.Args[1] != "calls" {
		fmt.Fprintln(os.Stderr, "usage: gonode calls N [SLEEP_MS]")
		os.Exit(2)
	}
	n, _ := strconv.Atoi(os.Args[2])
	sleep := 0
	if len(os.Args) > 3 {
		sleep, _ = strconv.Atoi(os.Args[3])
	}
	s := &store{dir: "."}
	for i := 0; i < n; i++ {
		tracerdTestMarker(i)
		if err := s.storeSnapshot(i); err != nil {
			fmt.Println("snapshot failed:", err)
		}
		time.Sleep(time.Duration(sleep) * time.Millisecond)
	}
	fmt.Println("done")
}
