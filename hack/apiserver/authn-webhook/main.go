// Command nri-align-authn-webhook answers the API server's delegated authentication and
// authorization, as kube-apiserver does for an extension API server inside a cluster:
//
//   - POST /apis/authentication.k8s.io/v1/tokenreviews: bearer tokens from a file in
//     kube-apiserver's --token-auth-file format (token,user,uid,"group1,group2"), checked by
//     the same code kube-apiserver uses for that flag (k8s.io/apiserver tokenfile);
//   - POST /apis/authorization.k8s.io/v1/subjectaccessreviews: allowed when a rule of the rules
//     file matches the user or one of its groups, the verb, the API group and the resource
//     (the ClusterRole a deployment would bind; the server itself always allows system:masters).
//
// Only for hack/apiserver-up: it serves HTTPS on loopback with the instance's certificates.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
)

// rule grants verbs on one resource of one API group to a subject ("user:NAME" or
// "group:NAME").
type rule struct {
	subject  string
	verbs    map[string]bool
	apiGroup string
	resource string
}

// readRules reads lines "SUBJECT VERB[,VERB...] APIGROUP RESOURCE"; '#' starts a comment and
// the core API group is written "".
func readRules(path string) ([]rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []rule
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(strings.SplitN(sc.Text(), "#", 2)[0])
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 || !strings.Contains(fields[0], ":") {
			return nil, fmt.Errorf("%s:%d: want SUBJECT VERBS APIGROUP RESOURCE, got %q", path, n, line)
		}
		r := rule{subject: fields[0], verbs: map[string]bool{}, apiGroup: fields[2], resource: fields[3]}
		if r.apiGroup == `""` {
			r.apiGroup = ""
		}
		for _, v := range strings.Split(fields[1], ",") {
			r.verbs[v] = true
		}
		rules = append(rules, r)
	}
	return rules, sc.Err()
}

func allowed(rules []rule, spec authzv1.SubjectAccessReviewSpec) (bool, string) {
	ra := spec.ResourceAttributes
	if ra == nil {
		return false, "only resource requests are granted"
	}
	subjects := map[string]bool{"user:" + spec.User: true}
	for _, g := range spec.Groups {
		subjects["group:"+g] = true
	}
	for _, r := range rules {
		if subjects[r.subject] && (r.verbs[ra.Verb] || r.verbs["*"]) &&
			r.apiGroup == ra.Group && (r.resource == ra.Resource || r.resource == "*") {
			return true, "granted to " + r.subject
		}
	}
	return false, fmt.Sprintf("no rule grants %s %s.%s to %s", ra.Verb, ra.Resource, ra.Group, spec.User)
}

func decode(w http.ResponseWriter, r *http.Request, into any) bool {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return false
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(into); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("writing reply: %v", err)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTPS on")
	cert := flag.String("tls-cert-file", "", "serving certificate")
	key := flag.String("tls-private-key-file", "", "serving key")
	tokens := flag.String("token-auth-file", "", "tokens, in kube-apiserver's --token-auth-file format")
	rulesFile := flag.String("authorization-rules-file", "", "SUBJECT VERBS APIGROUP RESOURCE lines")
	flag.Parse()

	authn, err := tokenfile.NewCSV(*tokens)
	if err != nil {
		log.Fatalf("reading %s: %v", *tokens, err)
	}
	rules, err := readRules(*rulesFile)
	if err != nil {
		log.Fatalf("reading rules: %v", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var review authnv1.TokenReview
		if !decode(w, r, &review) {
			return
		}
		review.Status = authnv1.TokenReviewStatus{Audiences: review.Spec.Audiences}
		resp, ok, err := authn.AuthenticateToken(context.Background(), review.Spec.Token)
		switch {
		case err != nil:
			review.Status.Error = err.Error()
		case ok:
			u := resp.User
			review.Status.Authenticated = true
			review.Status.User = authnv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
		}
		log.Printf("TokenReview: authenticated=%v user=%q", review.Status.Authenticated, review.Status.User.Username)
		review.Spec = authnv1.TokenReviewSpec{}
		reply(w, review)
	})
	mux.HandleFunc("/apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var review authzv1.SubjectAccessReview
		if !decode(w, r, &review) {
			return
		}
		ok, why := allowed(rules, review.Spec)
		review.Status = authzv1.SubjectAccessReviewStatus{Allowed: ok, Reason: why}
		log.Printf("SubjectAccessReview: allowed=%v %s", ok, why)
		reply(w, review)
	})
	log.Printf("serving on %s", *listen)
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, mux))
}
