// Command grpc-health serves grpc-go's own health service
// (google.golang.org/grpc/health, health.NewServer()) on one address, for the
// tests of the operator's gRPC health checks. The service is grpc-go's; this
// main only wires it to flags and to stdin.
//
//	grpc-health -listen 127.0.0.1:0 [-tls-cert c.pem -tls-key k.pem [-client-ca ca.pem]]
//	            [-status NAME=STATUS]...
//
// STATUS is SERVING, NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN (the enum of
// grpc.health.v1). The empty NAME is the server overall; grpc-go's
// health.NewServer() starts it SERVING. A service never set is unknown to the
// server: Check answers NOT_FOUND.
//
// The first stdout line is "listening HOST:PORT" (the bound address). Then
// each stdin line NAME=STATUS changes a status at run time and is answered
// on stdout by "set NAME=STATUS" once applied, or "error ..." when the line
// is not understood. The server stops when stdin closes or on SIGTERM.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type statuses []string

func (s *statuses) String() string     { return strings.Join(*s, ",") }
func (s *statuses) Set(v string) error { *s = append(*s, v); return nil }

// parse reads NAME=STATUS.
func parse(line string) (string, healthpb.HealthCheckResponse_ServingStatus, error) {
	name, st, ok := strings.Cut(line, "=")
	if !ok {
		return "", 0, fmt.Errorf("want NAME=STATUS, got %q", line)
	}
	v, ok := healthpb.HealthCheckResponse_ServingStatus_value[strings.TrimSpace(st)]
	if !ok {
		return "", 0, fmt.Errorf("unknown status %q (SERVING, NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN)", st)
	}
	return name, healthpb.HealthCheckResponse_ServingStatus(v), nil
}

func die(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "grpc-health: "+format+"\n", a...)
	os.Exit(2)
}

func serverTLS(cert, key, clientCA string) credentials.TransportCredentials {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		die("loading -tls-cert/-tls-key: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			die("reading -client-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			die("no certificate in -client-ca %s", clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	// credentials.NewTLS adds ALPN h2, as every grpc-go server does.
	return credentials.NewTLS(cfg)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	cert := flag.String("tls-cert", "", "PEM certificate (chain): serve TLS")
	key := flag.String("tls-key", "", "PEM private key of -tls-cert")
	clientCA := flag.String("client-ca", "", "PEM CA: require client certificates it signed")
	var initial statuses
	flag.Var(&initial, "status", "NAME=STATUS, repeated (NAME empty: the server overall)")
	flag.Parse()

	var opts []grpc.ServerOption
	switch {
	case *cert != "" && *key != "":
		opts = append(opts, grpc.Creds(serverTLS(*cert, *key, *clientCA)))
	case *cert != "" || *key != "" || *clientCA != "":
		die("-tls-cert and -tls-key go together; -client-ca needs them")
	}
	hs := health.NewServer()
	for _, s := range initial {
		name, st, err := parse(s)
		if err != nil {
			die("-status: %v", err)
		}
		hs.SetServingStatus(name, st)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, hs)

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		die("listen %s: %v", *listen, err)
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, a ...any) {
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
	}
	say("listening %s", lis.Addr())

	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		srv.Stop()
	}()
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			name, st, err := parse(in.Text())
			if err != nil {
				say("error %v", err)
				continue
			}
			hs.SetServingStatus(name, st)
			say("set %s=%s", name, st)
		}
		srv.Stop()
	}()
	if err := srv.Serve(lis); err != nil {
		die("serve: %v", err)
	}
}
