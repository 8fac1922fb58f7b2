/*
 * demo_agent.c: taskbox-demo-agent, the one program in the image the demo
 * builds (cli/demo_image.c): an image root holds nothing the host has, so its
 * agent and judge are this static, libc-only program.
 *
 *   demo-agent          the agent: reads its prompt, writes
 *                       /outputs/greeting.txt, says so on fd 3
 *   demo-agent judge    the judge: passes when the greeting is there
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GREETING "hello from inside a pinned image\n"

static int judge(void)
{
	char buf[256];
	ssize_t n;

	while (read(0, buf, sizeof(buf)) > 0) /* the conversation: not needed */
		;
	int fd = open("/outputs/greeting.txt", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	if (!strcmp(buf, GREETING))
		printf("{\"outcome\":\"pass\",\"score\":1,\"reason\":\"the image's agent wrote "
		       "its greeting\"}\n");
	else
		printf("{\"outcome\":\"fail\",\"score\":0,\"reason\":\"no greeting\"}\n");
	return 0;
}

int main(int argc, char **argv)
{
	char prompt[4096], name[128] = "";
	ssize_t n;

	if (argc > 1 && !strcmp(argv[1], "judge"))
		return judge();
	n = read(0, prompt, sizeof(prompt) - 1); /* the prompt's line */
	(void)n;
	int fd = open("/etc/image-name", O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, name, sizeof(name) - 1) : -1;
	if (fd >= 0)
		close(fd);
	name[n > 0 ? n : 0] = '\0';
	name[strcspn(name, "\n\"\\")] = '\0';
	fd = open("/outputs/greeting.txt", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, GREETING, sizeof(GREETING) - 1) != sizeof(GREETING) - 1)
		return 1;
	close(fd);
	dprintf(3,
		"{\"type\":\"message\",\"role\":\"assistant\",\"text\":\"Hello from %s: its "
		"root is the image, pinned by digest.\"}\n",
		name[0] ? name : "an image");
	return 0;
}
