package proxy

import (
	"mime"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// What the proxy passes between the caller and the service, and what it
// keeps back: the hop-by-hop headers, the query, the streamed answer.

// Header values the proxy sets on every request that needs them, shared:
// nothing changes a header's value slice in place.
var (
	teTrailers  = []string{"trailers"}
	noUserAgent = []string{""}
)

// hopHeaders are the hop-by-hop headers of RFC 9110 (and the older ones
// still sent): they are for one connection, not passed on.
var hopHeaders = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// dropHopByHop removes the hop-by-hop headers from h, and those its
// Connection header names.
func dropHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// hasToken reports whether the comma-separated header values hold token
// (case-insensitively).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

func isEventStream(contentType string) bool {
	const es = "text/event-stream"
	if len(contentType) < len(es) || !strings.EqualFold(contentType[:len(es)], es) {
		return false // most answers: nothing to parse
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == es
}

// cleanQuery re-encodes a query the service could read otherwise than the
// agent (a semicolon, a broken escape), as httputil.ReverseProxy does: a
// caller cannot smuggle parameters past the agent through it.
func cleanQuery(q string) string {
	for i := 0; i < len(q); {
		switch q[i] {
		case ';':
			return reencodeQuery(q)
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return reencodeQuery(q)
			}
			i += 3
		default:
			i++
		}
	}
	return q
}

func reencodeQuery(q string) string {
	v, _ := url.ParseQuery(q)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
