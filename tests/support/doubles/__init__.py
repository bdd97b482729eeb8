"""Test doubles that tests, e2e, the benchmarks and the demo share: the fake NVML node and MPS control daemon
over interceptor/build/fake, the interception library's test programs, and a second DRA driver's NICs."""
