"""The embedded default's core assignment: the client alone on one core, the server on the others."""

import pytest

from specguard.embedded.cpus import assign_cores, cpu_list


def test_two_cores_one_each():
    a = assign_cores({0, 1})
    assert a.client == {0} and a.server == {1}
    assert a.server_env() == {"VLLM_CPU_OMP_THREADS_BIND": "1", "OMP_NUM_THREADS": "1"}
    assert a.server_prefix("/usr/bin/taskset") == ["/usr/bin/taskset", "-c", "1"]


@pytest.mark.parametrize("allowed", [{0, 1, 2, 3}, {2, 5, 6, 7, 9}])
def test_more_cores_client_gets_the_lowest_and_the_server_the_rest(allowed):
    a = assign_cores(allowed)
    assert a.client == {min(allowed)} and a.server == set(allowed) - {min(allowed)}
    assert not (a.client & a.server)


def test_one_core_binds_nothing_and_says_so():
    a = assign_cores({3})
    assert a.client is None and a.server is None and a.server_env() == {} and a.server_prefix("taskset") == []
    assert "share" in a.note


def test_no_taskset_no_prefix():
    assert assign_cores({0, 1}).server_prefix(None) == []


def test_cpu_list_format():
    assert cpu_list(frozenset({0, 1, 2, 5, 7, 8})) == "0-2,5,7-8"
