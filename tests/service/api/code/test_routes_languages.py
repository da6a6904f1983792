"""/run_code (service/api/code.py) under SandboxFusion's names for Java, Node, Go and Rust
(``java``, ``nodejs``, ``go``, ``rust``), called by verl 0.9.1's own client
(``verl/utils/reward_score/sandbox_fusion/utils.py`` ``check_correctness``, loaded from its
file as tests/service/api/code/test_routes.py does): a correct program passes, a wrong one
fails, a compile error is verl's -4 for the compiled ones (java, go, rust)
and a runtime error (-2) for node, as SandboxFusion answers them."""

from __future__ import annotations

import os

import pytest

from rewardserve.models.rules.code.sandbox.builds import COMPILER_FILES
from tests.harness import serve_subprocess
from tests.service.api.code.test_routes import verl_sandbox_fusion

ADD = {
    "java": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
    " Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + s.nextLong()); } }",
    "nodejs": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);"
    " console.log(a + b);",
    "go": 'package main\nimport "fmt"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }\n',
    "rust": "use std::io::Read;\nfn main() { let mut s = String::new();"
    " std::io::stdin().read_to_string(&mut s).unwrap();"
    ' let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); println!("{}", v[0] + v[1]); }',
}
BROKEN = {
    "java": ("public class Main { public static void main(String[] a) { int x = } }", -4),
    "nodejs": ("function f( {", -2),
    "go": ("package main\nfunc main() { x := 1 }\n", -4),
    "rust": ('fn main() { let x: i32 = "one"; }', -4),
}
LOOP = {
    "java": "public class Main { public static void main(String[] a) { long x = 0; while (true) x++; } }",
    "nodejs": "let x = 0; for (;;) x++;",
    "go": "package main\nfunc main() { x := 0; for { x++ } }\n",
    "rust": 'fn main() { let mut x: u64 = 0; loop { x = x.wrapping_add(1); if x == 0 { println!("{}", x); } } }',
}
MODEL_NAME = {"java": "java", "nodejs": "javascript", "go": "go", "rust": "rust"}


@pytest.fixture(scope="module")
def url():
    with serve_subprocess(env={"REWARDSERVE_LOG_LEVEL": "warning"}) as base:
        yield base


@pytest.mark.parametrize(
    "language",
    [
        pytest.param(
            name, marks=pytest.mark.skipif(not os.path.exists(COMPILER_FILES[MODEL_NAME[name]]), reason=f"no {name}")
        )
        for name in ADD
    ],
)
def test_verl_s_client_runs_sandbox_fusion_s_java_nodejs_go_and_rust(url, language):
    verl = verl_sandbox_fusion()
    in_outs = {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "11\n"]}
    results, metadata = verl.check_correctness(url + "/run_code", in_outs, ADD[language], timeout=10, language=language)
    assert results == [True, False], metadata
    code, expected = BROKEN[language]
    results, metadata = verl.check_correctness(url + "/run_code", in_outs, code, timeout=10, language=language)
    assert results == [expected, expected], metadata
    once = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    results, metadata = verl.check_correctness(url + "/run_code", once, LOOP[language], timeout=1, language=language)
    assert results == [-3], metadata


def test_sandbox_fusion_s_names_map_onto_the_one_list_of_languages():
    """The routes' SandboxFusion names name exactly the languages the code model runs
    (models/rules/code/formats.py LANGUAGES), each once."""
    from rewardserve.models.rules.code.formats import LANGUAGES
    from rewardserve.service.api.code.routes import SANDBOX_FUSION_LANGUAGES

    ours = list(SANDBOX_FUSION_LANGUAGES.values())
    assert sorted(ours) == sorted(LANGUAGES) and len(set(ours)) == len(ours)
