"""The differential program fuzzer behind `caten fuzz`.

`gen` makes random well-typed programs (a seed gives one program, always the same), `check`
runs one on the numpy reference and on compiled runtimes in a worker process (bounds-checked,
outputs fenced by guard bytes) and compares, `shrink` reduces a failing program to a small one,
`driver` strings them together for the command line and the CI test.
"""
