package main

import "errors"

func fig9Cmd(args []string) error { return errors.New("fig9: not yet") }
