package sidecar

import (
	"log"
	"net/http"
	"time"
)

// The bounds of the stats and admin servers (docs/operations.md#the-stats-and-admin-ports).
// The stats port is on the pod IP, reachable from every pod: a connection
// there must cost little and not for long, whatever its peer does. The admin
// port is on loopback but gets the same read and idle bounds.
//
//	state                            bound
//	connected, nothing sent yet      localHeaderTimeout from the accept
//	head arriving (slowly)           localHeaderTimeout from its first byte
//	head and body arriving           localReadTimeout from the head's first byte
//	response being written           statsWriteTimeout / adminWriteTimeout
//	idle between requests            localIdleTimeout
//	more than statsMaxConnections    reset at once, counted (cappedListener)
const (
	localHeaderTimeout = 5 * time.Second
	localReadTimeout   = 5 * time.Second
	localIdleTimeout   = 5 * time.Second
	// A head larger than this is answered 431: Prometheus and the manager send
	// a few hundred bytes.
	localMaxHeaderBytes = 8 << 10
	// /metrics is a few tens of KiB, however slowly the scraper reads.
	statsWriteTimeout = 10 * time.Second
	// Longer than the pprof profiles and traces the admin port serves with
	// --enable-pprof (30 s by default): net/http/pprof refuses a duration
	// beyond the server's WriteTimeout.
	adminWriteTimeout = 2 * time.Minute
)

// DefaultStatsMaxConnections is the default of --stats-max-connections: a few
// scrapers and the manager need a handful.
const DefaultStatsMaxConnections = 64

// localServer is the http.Server of the stats or the admin port.
func localServer(h http.Handler, writeTimeout time.Duration, errLog *log.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: localHeaderTimeout, ReadTimeout: localReadTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: localIdleTimeout, MaxHeaderBytes: localMaxHeaderBytes, ErrorLog: errLog}
}
