"""Java, JavaScript (Node), Go and Rust in the ``code`` model (models/rules/code/__init__.py), each from
Debian's packages under /usr: the golden cases every language has (AC, WA, TLE, MLE, RE,
CE, OLE, a fork bomb, a file write outside /tmp, the network), and the build kept per
distinct program (models/rules/code/sandbox/builds.py).

Each language's program reads a command from stdin and does what it names, so that one
compile serves all its cases (the JVM's start and the compilers are the slow part)."""

from __future__ import annotations

import os
import socket

import pytest

from rewardserve.models.rules import RuleError
from rewardserve.models.rules.code import code_tests
from rewardserve.models.rules.code.sandbox.builds import COMPILER_FILES, builds, key

JAVA = r"""
import java.io.*;
import java.net.*;
import java.util.*;

public class Main {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String[] w = in.readLine().trim().split(" ");
        switch (w[0]) {
            case "add": System.out.println(Long.parseLong(w[1]) + Long.parseLong(w[2])); break;
            case "loop": long x = 0; while (true) { x++; }
            case "alloc": { List<long[]> held = new ArrayList<>(); while (true) held.add(new long[1 << 20]); }
            case "throw": throw new IllegalStateException("boom");
            case "spam": { StringBuilder b = new StringBuilder(); for (int i = 0; i < 1 << 16; i++) b.append('x');
                           String s = b.toString(); while (true) System.out.print(s); }
            case "fork": {
                try {
                    for (int i = 0; i < 1000; i++) new ProcessBuilder("/bin/sleep", "30").start();
                    System.out.println("unlimited");
                }
                catch (IOException e) { System.out.println("limited"); }
                break;
            }
            case "write": {
                try (FileWriter f = new FileWriter("/usr/escaped")) { f.write("x"); System.out.println("written"); }
                catch (IOException e) { System.out.println("refused"); }
                break;
            }
            case "net": {
                try (Socket s = new Socket()) {
                    s.connect(new InetSocketAddress("127.0.0.1", Integer.parseInt(w[1])), 2000);
                    System.out.println("connected");
                }
                catch (IOException e) { System.out.println("refused"); }
                break;
            }
        }
    }
}
"""

JAVASCRIPT = r"""
const fs = require('fs');
const w = fs.readFileSync(0, 'utf8').trim().split(' ');
if (w[0] === 'add') console.log(Number(w[1]) + Number(w[2]));
else if (w[0] === 'loop') { let x = 0; for (;;) x++; }
else if (w[0] === 'alloc') { const held = []; for (;;) held.push(new Array(1 << 20).fill(1.5)); }
else if (w[0] === 'throw') throw new Error('boom');
else if (w[0] === 'spam') { const s = 'x'.repeat(1 << 16); for (;;) fs.writeSync(1, s); }
else if (w[0] === 'fork') {
  const { spawn } = require('child_process');
  let failed = false;
  for (let i = 0; i < 1000; i++) {
    try { spawn('/bin/sleep', ['30']).on('error', () => { failed = true; }); } catch (e) { failed = true; break; }
  }
  setTimeout(() => { console.log(failed ? 'limited' : 'unlimited'); process.exit(0); }, 500);
}
else if (w[0] === 'write') {
  try { fs.writeFileSync('/usr/escaped', 'x'); console.log('written'); } catch (e) { console.log('refused'); }
}
else if (w[0] === 'net') {
  const c = require('net').connect(Number(w[1]), '127.0.0.1');
  c.on('connect', () => { console.log('connected'); process.exit(0); });
  c.on('error', () => { console.log('refused'); process.exit(0); });
}
"""

GO = r"""
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	w := strings.Fields(line)
	switch w[0] {
	case "add":
		a, _ := strconv.ParseInt(w[1], 10, 64)
		b, _ := strconv.ParseInt(w[2], 10, 64)
		fmt.Println(a + b)
	case "loop":
		x := 0
		for {
			x++
		}
	case "alloc":
		var held [][]byte
		for {
			b := make([]byte, 16<<20)
			for i := range b {
				b[i] = 1
			}
			held = append(held, b)
		}
	case "throw":
		panic("boom")
	case "spam":
		s := strings.Repeat("x", 1<<16)
		for {
			os.Stdout.WriteString(s)
		}
	case "fork":
		for i := 0; i < 1000; i++ {
			if err := exec.Command("/bin/sleep", "30").Start(); err != nil {
				fmt.Println("limited")
				return
			}
		}
		fmt.Println("unlimited")
	case "poison": // its own build swapped for a script, for the tests after this one
		os.Remove("/tmp/main")
		os.WriteFile("/tmp/main", []byte("#!/bin/sh\necho pwned\n"), 0o755)
		fmt.Println("poisoned")
	case "write":
		if err := os.WriteFile("/usr/escaped", []byte("x"), 0o644); err != nil {
			fmt.Println("refused")
		} else {
			fmt.Println("written")
		}
	case "net":
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+w[1], 2*time.Second)
		if err != nil {
			fmt.Println("refused")
		} else {
			c.Close()
			fmt.Println("connected")
		}
	}
}
"""

RUST = r"""
use std::io::{Read, Write};

fn main() {
    let mut line = String::new();
    std::io::stdin().read_to_string(&mut line).unwrap();
    let w: Vec<&str> = line.split_whitespace().collect();
    match w[0] {
        "add" => println!("{}", w[1].parse::<i64>().unwrap() + w[2].parse::<i64>().unwrap()),
        "loop" => {
            let mut x: u64 = 0;
            loop {
                x = x.wrapping_mul(3).wrapping_add(1);
                if x == 7 {
                    println!("{}", x);
                }
            }
        }
        "alloc" => {
            let mut held: Vec<Vec<u8>> = Vec::new();
            loop {
                held.push(vec![1u8; 1 << 20]);
            }
        }
        "throw" => panic!("boom"),
        "spam" => {
            let s = "x".repeat(1 << 16);
            let mut out = std::io::stdout();
            loop {
                if out.write_all(s.as_bytes()).is_err() {
                    return;
                }
            }
        }
        "fork" => {
            for _ in 0..1000 {
                if std::process::Command::new("/bin/sleep").arg("30").spawn().is_err() {
                    println!("limited");
                    return;
                }
            }
            println!("unlimited");
        }
        "write" => match std::fs::write("/usr/escaped", "x") {
            Ok(_) => println!("written"),
            Err(_) => println!("refused"),
        },
        "net" => match std::net::TcpStream::connect(("127.0.0.1", w[1].parse::<u16>().unwrap())) {
            Ok(_) => println!("connected"),
            Err(_) => println!("refused"),
        },
        _ => {}
    }
}
"""

PROGRAMS = {"java": JAVA, "javascript": JAVASCRIPT, "go": GO, "rust": RUST}
NOT_COMPILING = {
    "java": "public class Main { public static void main(String[] a) { int x = } }",
    "javascript": "function f( {",
    "go": "package main\nfunc main() { x := 1 }\n",  # an unused variable: Go's compiler refuses it
    "rust": 'fn main() { let x: i32 = "one"; }',
}


def needs(language):
    return pytest.mark.skipif(not os.path.exists(COMPILER_FILES[language]), reason=f"no {language} toolchain here")


@pytest.fixture(scope="module")
def host_port():
    """A port listening on the host's loopback: the sandbox's network is its own, so a
    program inside must not reach it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def golden(port):
    cases = [
        ("add 1 2", "3", "AC"),
        ("add 2 2", "5", "WA"),
        ("loop", "", "TLE"),
        ("alloc", "", "MLE"),
        ("throw", "", "RE"),
        ("spam", "", "OLE"),
        ("fork", "limited", "AC"),  # the process limit holds
        ("write", "refused", "AC"),  # the root is read-only
        (f"net {port}", "refused", "AC"),  # the host's loopback is not the sandbox's
    ]
    reference = {"inputs": [c[0] + "\n" for c in cases], "outputs": [c[1] + "\n" for c in cases]}
    return reference, [c[2] for c in cases]


@pytest.mark.alone
@pytest.mark.parametrize("language", [pytest.param(name, marks=needs(name)) for name in PROGRAMS])
def test_each_language_gets_every_verdict_and_stays_in_its_sandbox(language, host_port):
    reference, expected = golden(host_port)
    result = code_tests(PROGRAMS[language], reference, language=language, timeout_s=2.0, memory_mb=256, extract=False)
    assert [t["verdict"] for t in result.tests] == expected, result.tests
    assert not os.path.exists("/usr/escaped")
    broken = code_tests(NOT_COMPILING[language], reference, language=language, extract=False)
    assert float(broken) == 0.0 and [t["verdict"] for t in broken.tests] == ["CE"], broken.tests


@pytest.mark.parametrize("language", [pytest.param(name, marks=needs(name)) for name in PROGRAMS])
def test_a_program_is_compiled_once_and_its_build_kept_for_its_source_alone(language):
    reference = {"inputs": ["add 20 22\n"], "outputs": ["42\n"]}
    code = PROGRAMS[language] + "\n// kept\n"
    assert float(code_tests(code, reference, language=language, extract=False)) == 1.0
    build = builds().get(key(language, code))
    assert build, "the compiled program was not kept"
    assert float(code_tests(code, reference, language=language, extract=False)) == 1.0
    assert builds().get(key(language, code)) == build
    other = code + "\n// another program\n"
    assert builds().get(key(language, other)) is None


@needs("go")
def test_a_program_that_swaps_its_own_binary_poisons_neither_its_kept_build_nor_the_next_completion():
    code = GO + "\n// poisoner\n"  # a source of its own: compiled in this test, not found kept
    assert builds().get(key("go", code)) is None
    swapped = {"inputs": ["poison\n", "add 1 1\n"], "outputs": ["poisoned\n", "2\n"]}
    first = code_tests(code, swapped, language="go", outputs=True, extract=False)
    # Its second test ran the script it wrote: within a completion /tmp is the program's own.
    assert [t["verdict"] for t in first.tests] == ["AC", "WA"] and first.tests[1]["stdout"] == "pwned\n", first.tests
    # The build kept is the compiler's, read before any test ran: the same source again
    # (from the cache) computes, it does not print the script's word.
    again = code_tests(code, {"inputs": ["add 1 1\n"], "outputs": ["2\n"]}, language="go", extract=False)
    assert [t["verdict"] for t in again.tests] == ["AC"], again.tests


@needs("go")
def test_a_compiler_that_cannot_start_makes_the_item_invalid_not_a_compile_error(monkeypatch):
    from rewardserve.models.rules.code import sandbox
    from rewardserve.models.rules.code.sandbox import command as sandbox_command

    driver = sandbox_command.driver_source()
    broken = driver.replace('("/usr/bin/go", "build"', '("/usr/bin/no-such-go", "build"')
    assert broken != driver
    monkeypatch.setattr(sandbox_command, "driver_source", lambda: broken)
    monkeypatch.setattr(sandbox, "_idle", sandbox._Idle())  # sandboxes started with the broken driver only
    with pytest.raises(RuleError, match="toolchain failed"):
        code_tests(
            GO + "\n// no compiler\n", {"inputs": ["add 1 2\n"], "outputs": ["3\n"]}, language="go", extract=False
        )
