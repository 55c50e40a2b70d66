// Package chaos tests a LightQ cluster the way it fails: three broker processes on loopback,
// producers and consumers running, and fault cycles chosen at random under a seed.
package chaos
