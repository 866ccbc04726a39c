/*
 * vcard.c: a smart card for tests, behind the real reader stack. It
 * connects to vsmartcard's vpcd reader driver (loaded by pcscd) as the
 * card side and answers vpcd with a CAC card that libcacard emulates over
 * an NSS database. OpenSC's cac driver then talks APDUs to it through
 * pcscd, as it would to a card in a USB reader.
 *
 *   vcard -D DBDIR [-p PORT] [-r N] [-c CTLSOCK] [-T TRIES] [-R] [-d MS]
 *         [-s MS] [-v] NICKNAME...
 *
 *   -D DBDIR  the NSS database (sql:) holding the certificates and keys;
 *             its password is the card's PIN
 *   -p PORT   vpcd's first reader's port on 127.0.0.1 (35963, vpcd's
 *             default); reader N listens on PORT+N
 *   -r N      the reader the card starts in (0): Debian's vpcd makes two,
 *             "Virtual PCD 00 00" on PORT and "Virtual PCD 00 01" on PORT+1
 *   -c PATH   the control socket (below)
 *   -T N      PIN tries before the PIN blocks (3)
 *   -R        pass libcacard's own status words through, unchanged
 *   -d MS     wait MS before every answer to an APDU (a card's speed)
 *   -s MS     wait MS more before the answer to a signature or decryption
 *             (its last block, where the key is used)
 *   -v        log every APDU's header and status word to stderr
 *   NICKNAME  the certificates (with their keys) the card carries, in order
 *
 * vpcd's protocol (both ways: a 2-byte big-endian length, then the bytes).
 * A 1-byte message from vpcd is a control code: 0 power off, 1 power on,
 * 2 reset (no answer to these three), 4 get ATR (answer: the ATR). Anything
 * longer is a command APDU, answered with the response APDU. An empty
 * answer makes vpcd drop the card, so a failure is answered 6F00.
 *
 * Removal and insertion. vpcd asks for the ATR each time pcscd polls the
 * reader; a closed socket means no card. So "removed" is this program
 * closing its socket (after powering the card off, as pulling a real card
 * does: it logs the card out), and "inserted" is connecting again. While
 * inserted and not connected (pcscd stopped, or not up yet) it tries to
 * connect every 50 ms.
 *
 * The control socket (a Unix socket at -c PATH) takes one command per
 * connection, one line, and answers one line ("ok", a number, or "error:
 * ..."):
 *   remove          take the card out (answered once the socket is closed)
 *   insert [N]      put it back, into reader N (the one it was in when N is
 *                   left out); answered "ok" once connected to vpcd, or
 *                   "ok waiting" when vpcd is not listening yet. A card
 *                   still in another reader is taken out of it first
 *   delay MS        set -d;   signdelay MS   set -s
 *   tries           the PIN tries left (0: blocked)
 *   status          "inserted|removed connected|waiting reader=N tries=N"
 * A command that arrives while an answer is being delayed is served at
 * once; a removal then drops that answer, as a card pulled mid-command.
 * SIGTERM ends the program.
 *
 * What libcacard does not do as a real card, this program does (unless
 * -R): a wrong PIN is answered 63Cx with x tries left (libcacard: 6985),
 * and once no tries are left every VERIFY is answered 6983 (blocked)
 * without the PIN being looked at; a VERIFY without data (a PIN query)
 * while logged out is 63Cx (libcacard: 6A88); a signature while logged out
 * is 6982, security status not satisfied (libcacard: 6985). A correct PIN
 * sets the count back to TRIES. The count lives in this process only.
 *
 * Built by the tests (pkcs11/pkcs11test/card.go) with
 *   gcc -O2 -o vcard vcard.c $(pkg-config --cflags --libs libcacard)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <libcacard.h>

#define INS_VERIFY 0x20
#define INS_SIGN_DECRYPT 0x42 /* CAC's SIGN/DECRYPT */

static int port = 0x8C7B; /* reader 0's; reader N is at port + N */
static int reader_index;   /* the reader the card is in, or goes into */
static int max_tries = 3, tries;
static int raw_words, verbose;
static int delay_ms, sign_delay_ms;

static VReader *reader;
static int vpcd = -1;    /* the connection to vpcd, -1 when none */
static int inserted = 1; /* whether the card is in: connect when not connected */
static int ctl = -1;     /* the control socket's listener */

static void logf_(const char *fmt, ...)
{
    va_list ap;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "vcard %ld.%03ld: ", (long)ts.tv_sec, ts.tv_nsec / 1000000);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* drain_events empties libcacard's event queue: no thread reads it here. */
static void drain_events(void)
{
    VEvent *ev;
    while ((ev = vevent_get_next_vevent()) != NULL) {
        vevent_delete(ev);
    }
}

static void disconnect(const char *why)
{
    if (vpcd < 0) {
        return;
    }
    close(vpcd);
    vpcd = -1;
    logf_("disconnected from vpcd: %s", why);
}

/* try_connect connects to vpcd when the card is in and not connected. */
static void try_connect(void)
{
    struct sockaddr_in a;
    struct timeval tv = {.tv_sec = 5};
    int fd, one = 1;

    if (!inserted || vpcd >= 0) {
        return;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return;
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port + reader_index);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* vpcd sends a message's length and body together: a read that stalls
     * this long means a broken connection, not a slow one. */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    vpcd = fd;
    logf_("connected to vpcd on 127.0.0.1:%d (reader %d)", port + reader_index, reader_index);
}

/*
 * read_full reads exactly n bytes. TCP_QUICKACK is re-armed before every
 * read: the kernel turns it off by itself, and without it vpcd's Nagle
 * waits for our delayed ACK between a message's length and its body
 * (about 40 ms a message, seconds for a signature).
 */
static int read_full(int fd, unsigned char *buf, size_t n)
{
    size_t got = 0;
    int one = 1;
    while (got < n) {
        ssize_t r;
        setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
        r = recv(fd, buf + got, n - got, 0);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        got += r;
    }
    return 0;
}

static int send_msg(const unsigned char *data, int len)
{
    unsigned char buf[2 + 65536];
    size_t off = 0, n = 2 + len;
    buf[0] = len >> 8;
    buf[1] = len & 0xff;
    memcpy(buf + 2, data, len);
    while (off < n) {
        ssize_t w = send(vpcd, buf + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        off += w;
    }
    return 0;
}

static void card_power(int on)
{
    if (on) {
        vreader_power_on(reader, NULL, NULL);
    } else {
        vreader_power_off(reader);
    }
    drain_events();
}

static void handle_control(void);

/*
 * wait_ms waits ms while serving the control socket. It returns 0 when the
 * connection to vpcd is still there afterwards (the answer is to be sent).
 */
static int wait_ms(int ms)
{
    long long end = now_ms() + ms;
    while (vpcd >= 0) {
        long long left = end - now_ms();
        struct pollfd p = {.fd = ctl, .events = POLLIN};
        if (left <= 0) {
            return 0;
        }
        if (poll(&p, 1, (int)left) > 0) {
            handle_control();
        }
    }
    return -1;
}

/* sw returns the status word at the end of a response. */
static int sw(const unsigned char *r, int len)
{
    return len >= 2 ? (r[len - 2] << 8) | r[len - 1] : -1;
}

static int set_sw(unsigned char *r, int word)
{
    r[0] = word >> 8;
    r[1] = word & 0xff;
    return 2;
}

/* apdu answers one command APDU into resp and returns its length. */
static int apdu(unsigned char *cmd, int len, unsigned char *resp, int cap)
{
    int ins = len >= 4 ? cmd[1] : -1;
    /* A VERIFY carries the PIN when it has a body (short APDU: Lc > 0). */
    int verify = ins == INS_VERIFY && (cmd[0] & 0xf0) == 0;
    int has_pin = verify && len > 5 && cmd[4] != 0;
    int n = cap, word;

    if (verify && !raw_words && tries == 0) {
        return set_sw(resp, 0x6983);
    }
    if (vreader_xfr_bytes(reader, cmd, len, resp, &n) != VREADER_OK || n < 2) {
        return set_sw(resp, 0x6F00);
    }
    drain_events();
    word = sw(resp, n);
    if (raw_words) {
        return n;
    }
    if (verify && word == 0x9000) {
        if (has_pin) {
            tries = max_tries;
        }
        return n;
    }
    if (has_pin) {
        /* libcacard answers a wrong PIN 6985 (PK11_Authenticate failed). */
        if (tries > 0) {
            tries--;
        }
        logf_("wrong PIN: %d tries left", tries);
        return set_sw(resp, 0x63C0 | (tries > 15 ? 15 : tries));
    }
    if (verify) {
        return set_sw(resp, 0x63C0 | (tries > 15 ? 15 : tries));
    }
    if (ins == INS_SIGN_DECRYPT && word == 0x6985) {
        return set_sw(resp, 0x6982);
    }
    return n;
}

/* serve reads one message from vpcd and answers it when it asks for one. */
static void serve(void)
{
    static unsigned char msg[65536], resp[65536 + 2];
    unsigned char hdr[2];
    int len, n, sign;

    if (read_full(vpcd, hdr, 2) < 0) {
        disconnect("vpcd closed the connection");
        return;
    }
    len = (hdr[0] << 8) | hdr[1];
    if (read_full(vpcd, msg, len) < 0) {
        disconnect("vpcd closed the connection inside a message");
        return;
    }
    if (len == 1) {
        switch (msg[0]) {
        case 0:
            card_power(0);
            return;
        case 1:
            card_power(1);
            return;
        case 2:
            card_power(0);
            card_power(1);
            return;
        case 4:
            n = sizeof resp;
            vcard_emul_get_atr(NULL, resp, &n);
            if (send_msg(resp, n) < 0) {
                disconnect("could not send the ATR");
            }
            return;
        default:
            logf_("unknown control code %d from vpcd", msg[0]);
            return;
        }
    }
    if (len < 4) {
        n = set_sw(resp, 0x6700); /* wrong length */
    } else {
        n = apdu(msg, len, resp, sizeof resp);
    }
    if (verbose) {
        logf_("APDU %02X %02X %02X %02X (%d bytes) -> %04X (%d bytes)", msg[0],
              len > 1 ? msg[1] : 0, len > 2 ? msg[2] : 0, len > 3 ? msg[3] : 0,
              len, sw(resp, n), n);
    }
    /* The key is used at the last block (P1 0; 0x80: more to come). */
    sign = msg[1] == INS_SIGN_DECRYPT && msg[2] == 0x00;
    memset(msg, 0, len); /* a VERIFY's PIN does not stay in memory */
    if (delay_ms > 0 && wait_ms(delay_ms) < 0) {
        return;
    }
    if (sign_delay_ms > 0 && sign && wait_ms(sign_delay_ms) < 0) {
        return;
    }
    if (vpcd >= 0 && send_msg(resp, n) < 0) {
        disconnect("could not send an answer");
    }
}

static void reply(int fd, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    buf[n++] = '\n';
    if (write(fd, buf, n) < 0) {
        logf_("control: could not answer: %s", strerror(errno));
    }
}

/* handle_control serves one connection to the control socket. */
static void handle_control(void)
{
    char line[128];
    size_t got = 0;
    int fd = accept4(ctl, NULL, NULL, SOCK_CLOEXEC), ms, r;
    struct timeval tv = {.tv_sec = 2};

    if (fd < 0) {
        return;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (got < sizeof line - 1) {
        ssize_t r = read(fd, line + got, sizeof line - 1 - got);
        if (r <= 0) {
            break;
        }
        got += r;
        if (memchr(line, '\n', got)) {
            break;
        }
    }
    line[got] = 0;
    line[strcspn(line, "\r\n")] = 0;
    logf_("control: %s", line);
    if (strcmp(line, "remove") == 0) {
        inserted = 0;
        card_power(0);
        disconnect("card removed");
        reply(fd, "ok");
    } else if (strcmp(line, "insert") == 0 ||
               (sscanf(line, "insert %d", &r) == 1 && r >= 0 && r < 2)) {
        if (strcmp(line, "insert") != 0 && r != reader_index) {
            /* Into another reader: out of this one first, as a hand does. */
            if (vpcd >= 0) {
                card_power(0);
                disconnect("card moved to another reader");
            }
            reader_index = r;
        }
        inserted = 1;
        try_connect();
        reply(fd, vpcd >= 0 ? "ok" : "ok waiting");
    } else if (sscanf(line, "delay %d", &ms) == 1 && ms >= 0) {
        delay_ms = ms;
        reply(fd, "ok");
    } else if (sscanf(line, "signdelay %d", &ms) == 1 && ms >= 0) {
        sign_delay_ms = ms;
        reply(fd, "ok");
    } else if (strcmp(line, "tries") == 0) {
        reply(fd, "%d", tries);
    } else if (strcmp(line, "status") == 0) {
        reply(fd, "%s %s reader=%d tries=%d", inserted ? "inserted" : "removed",
              vpcd >= 0 ? "connected" : "waiting", reader_index, tries);
    } else {
        reply(fd, "error: unknown command");
    }
    close(fd);
}

static int listen_control(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd;
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "vcard: control socket path too long: %s\n", path);
        return -1;
    }
    strcpy(a.sun_path, path);
    unlink(path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 8) < 0) {
        fprintf(stderr, "vcard: control socket %s: %s\n", path, strerror(errno));
        return -1;
    }
    return fd;
}

static int init_card(const char *db, char **nicks, int n)
{
    GString *opts = g_string_new(NULL);
    VCardEmulOptions *o;
    VReaderList *list;
    VReaderListEntry *e;
    int i;

    g_string_printf(opts, "db=\"sql:%s\" use_hw=no soft=(,vcard,CAC,", db);
    for (i = 0; i < n; i++) {
        g_string_append_printf(opts, ",%s", nicks[i]);
    }
    g_string_append(opts, ")");
    o = vcard_emul_options(opts->str);
    g_string_free(opts, TRUE);
    if (o == NULL || vcard_emul_init(o) != VCARD_EMUL_OK) {
        fprintf(stderr, "vcard: libcacard could not open the NSS database %s with %d certificates\n", db, n);
        return -1;
    }
    list = vreader_get_reader_list();
    for (e = vreader_list_get_first(list); e != NULL; e = vreader_list_get_next(e)) {
        VReader *r = vreader_list_get_reader(e);
        if (vreader_card_is_present(r) == VREADER_OK) {
            reader = vreader_reference(r);
            break;
        }
    }
    vreader_list_delete(list);
    drain_events();
    if (reader == NULL) {
        fprintf(stderr, "vcard: libcacard made no card from the database %s\n", db);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *db = NULL, *ctl_path = NULL;
    int c;

    signal(SIGPIPE, SIG_IGN);
    while ((c = getopt(argc, argv, "D:p:r:c:T:Rd:s:v")) != -1) {
        switch (c) {
        case 'D': db = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'r': reader_index = atoi(optarg); break;
        case 'c': ctl_path = optarg; break;
        case 'T': max_tries = atoi(optarg); break;
        case 'R': raw_words = 1; break;
        case 'd': delay_ms = atoi(optarg); break;
        case 's': sign_delay_ms = atoi(optarg); break;
        case 'v': verbose = 1; break;
        default:
            fprintf(stderr, "usage: vcard -D DBDIR [-p PORT] [-r N] [-c CTLSOCK] [-T TRIES] [-R] [-d MS] [-s MS] [-v] NICKNAME...\n");
            return 2;
        }
    }
    if (db == NULL || optind >= argc || port <= 0 || port > 65534 || reader_index < 0 || reader_index > 1 || max_tries < 1) {
        fprintf(stderr, "vcard: need -D DBDIR, a valid port, reader (0 or 1) and tries, and at least one certificate nickname\n");
        return 2;
    }
    tries = max_tries;
    if (init_card(db, argv + optind, argc - optind) < 0) {
        return 1;
    }
    if (ctl_path != NULL && (ctl = listen_control(ctl_path)) < 0) {
        return 1;
    }
    logf_("card ready; %d PIN tries; control socket %s", max_tries, ctl_path ? ctl_path : "(none)");
    for (;;) {
        struct pollfd p[2];
        int n = 0, timeout = -1;

        try_connect();
        if (inserted && vpcd < 0) {
            timeout = 50; /* vpcd is not listening yet: try again soon */
        }
        if (vpcd >= 0) {
            p[n++] = (struct pollfd){.fd = vpcd, .events = POLLIN};
        }
        if (ctl >= 0) {
            p[n++] = (struct pollfd){.fd = ctl, .events = POLLIN};
        }
        if (poll(p, n, timeout) < 0) {
            if (errno == EINTR) {
                continue;
            }
            perror("vcard: poll");
            return 1;
        }
        for (c = 0; c < n; c++) {
            if (p[c].revents == 0) {
                continue;
            }
            if (p[c].fd == ctl) {
                handle_control();
            } else if (p[c].fd == vpcd) {
                serve();
            }
        }
    }
}
