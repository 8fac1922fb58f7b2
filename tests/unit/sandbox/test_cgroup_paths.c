/*
 * test_cgroup_paths.c: the worker's own cgroup directory found from the
 * texts of /proc/self/cgroup and /proc/self/mountinfo as each kind of
 * machine gives them: cgroup v1 in a container sharing the host's cgroup
 * namespace (podman's default on v1), v1 with a private namespace, v2
 * both ways, on a host; and the mounts that do not show our cgroup.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cgroup_paths.h"

/* podman on a v1 host, host cgroup namespace: every hierarchy is mounted
 * with the container's cgroup as its root. */
static const char v1_hostns_cgroup[] = "12:pids:/libpod_parent/libpod-4f2a\n"
				       "5:memory:/libpod_parent/libpod-4f2a\n"
				       "4:cpu,cpuacct:/libpod_parent/libpod-4f2a\n"
				       "1:name=systemd:/libpod_parent/libpod-4f2a\n"
				       "0::/libpod_parent/libpod-4f2a\n";
static const char v1_hostns_mountinfo[] =
    "600 500 0:60 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u\n"
    "610 600 0:61 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755\n"
    "611 610 0:27 /libpod_parent/libpod-4f2a /sys/fs/cgroup/systemd rw,nosuid "
    "shared:9 - cgroup cgroup rw,xattr,name=systemd\n"
    "612 610 0:31 /libpod_parent/libpod-4f2a /sys/fs/cgroup/memory rw,nosuid "
    "- cgroup cgroup rw,memory\n"
    "613 610 0:35 /libpod_parent/libpod-4f2a /sys/fs/cgroup/pids rw,nosuid - "
    "cgroup cgroup rw,pids\n"
    "614 610 0:30 /libpod_parent/libpod-4f2a /sys/fs/cgroup/cpu,cpuacct rw "
    "shared:12 master:3 - cgroup cgroup rw,cpu,cpuacct\n"
    "615 610 0:26 /libpod_parent/libpod-4f2a /sys/fs/cgroup/unified rw - cgroup2 "
    "cgroup2 rw,nsdelegate\n";

static void test_cgroup_paths__v1_host_namespace_in_a_container_is_the_mount_itself(void **state)
{
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), v1_hostns_cgroup,
					      v1_hostns_mountinfo, "memory", &err),
			 0);
	assert_string_equal(out, "/sys/fs/cgroup/memory");
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), v1_hostns_cgroup,
					      v1_hostns_mountinfo, "cpuacct", &err),
			 0);
	assert_string_equal(out, "/sys/fs/cgroup/cpu,cpuacct");
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), v1_hostns_cgroup,
					      v1_hostns_mountinfo, NULL, &err),
			 0);
	assert_string_equal(out, "/sys/fs/cgroup/unified");
}

static void test_cgroup_paths__v1_host_namespace_below_the_mount_root_keeps_the_rest(void **state)
{
	static const char self[] = "5:memory:/libpod_parent/libpod-4f2a/worker\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(
	    tb_cgroup_paths_find(out, sizeof(out), self, v1_hostns_mountinfo, "memory", &err), 0);
	assert_string_equal(out, "/sys/fs/cgroup/memory/worker");
}

static void test_cgroup_paths__v1_private_namespace_joins_the_own_path(void **state)
{
	static const char self[] = "5:memory:/\n4:cpu,cpuacct:/\n12:pids:/\n0::/\n";
	static const char mi[] =
	    "612 610 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
	    "613 610 0:35 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, "pids", &err), 0);
	assert_string_equal(out, "/sys/fs/cgroup/pids");
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, "cpu", &err),
			 TB_ENOTFOUND);
}

static void test_cgroup_paths__v1_on_a_host_joins_the_service_path(void **state)
{
	static const char self[] = "5:memory:/system.slice/taskbox-worker.service\n";
	static const char mi[] =
	    "31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, "memory", &err), 0);
	assert_string_equal(out, "/sys/fs/cgroup/memory/system.slice/taskbox-worker.service");
}

static void test_cgroup_paths__v2_host_namespace_in_a_container_is_the_mount_itself(void **state)
{
	static const char self[] = "0::/system.slice/docker-9c1e.scope\n";
	static const char mi[] = "700 690 0:29 /system.slice/docker-9c1e.scope /sys/fs/cgroup "
				 "rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, NULL, &err), 0);
	assert_string_equal(out, "/sys/fs/cgroup");
}

static void test_cgroup_paths__v2_private_namespace_is_the_mount(void **state)
{
	static const char self[] = "0::/\n";
	static const char mi[] = "700 690 0:29 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, NULL, &err), 0);
	assert_string_equal(out, "/sys/fs/cgroup");
}

static void test_cgroup_paths__v2_on_a_host_joins_the_service_path(void **state)
{
	static const char self[] = "0::/system.slice/taskbox-worker.service\n";
	static const char mi[] = "30 24 0:26 / /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, NULL, &err), 0);
	assert_string_equal(out, "/sys/fs/cgroup/system.slice/taskbox-worker.service");
}

static void test_cgroup_paths__mount_not_showing_our_cgroup_is_an_error_naming_both(void **state)
{
	/* "/a/bc" is not under "/a/b", though it starts with it */
	static const char self[] = "5:memory:/a/bc\n";
	static const char mi[] =
	    "612 610 0:31 /a/b /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, "memory", &err), TB_EIO);
	assert_non_null(strstr(err.msg, "/a/bc"));
	assert_non_null(strstr(err.msg, "/sys/fs/cgroup/memory"));
}

static void test_cgroup_paths__a_later_mount_that_shows_it_is_used(void **state)
{
	static const char self[] = "0::/x/y\n";
	static const char mi[] = "1 0 0:29 /other /mnt/a rw - cgroup2 cgroup2 rw\n"
				 "2 0 0:29 /x /mnt/b\\040dir rw - cgroup2 cgroup2 rw\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, NULL, &err), 0);
	assert_string_equal(out, "/mnt/b dir/y");
}

static void test_cgroup_paths__no_hierarchy_mounted_is_not_found(void **state)
{
	static const char self[] = "0::/\n";
	static const char mi[] = "30 24 0:26 / / rw - ext4 /dev/sda1 rw\n";
	char out[256];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, NULL, &err),
			 TB_ENOTFOUND);
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), "", mi, "memory", &err),
			 TB_ENOTFOUND);
}

static void test_cgroup_paths__a_path_too_long_is_refused(void **state)
{
	static const char self[] = "0::/system.slice/taskbox-worker.service\n";
	static const char mi[] = "30 24 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
	char out[16];
	tb_error_t err;

	(void)state;
	assert_int_equal(tb_cgroup_paths_find(out, sizeof(out), self, mi, NULL, &err), TB_ETOOBIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
		    test_cgroup_paths__v1_host_namespace_in_a_container_is_the_mount_itself),
		cmocka_unit_test(
		    test_cgroup_paths__v1_host_namespace_below_the_mount_root_keeps_the_rest),
		cmocka_unit_test(test_cgroup_paths__v1_private_namespace_joins_the_own_path),
		cmocka_unit_test(test_cgroup_paths__v1_on_a_host_joins_the_service_path),
		cmocka_unit_test(
		    test_cgroup_paths__v2_host_namespace_in_a_container_is_the_mount_itself),
		cmocka_unit_test(test_cgroup_paths__v2_private_namespace_is_the_mount),
		cmocka_unit_test(test_cgroup_paths__v2_on_a_host_joins_the_service_path),
		cmocka_unit_test(
		    test_cgroup_paths__mount_not_showing_our_cgroup_is_an_error_naming_both),
		cmocka_unit_test(test_cgroup_paths__a_later_mount_that_shows_it_is_used),
		cmocka_unit_test(test_cgroup_paths__no_hierarchy_mounted_is_not_found),
		cmocka_unit_test(test_cgroup_paths__a_path_too_long_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
