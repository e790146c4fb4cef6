// Package benchkit holds what the benchmark programs share: the servers' settings,
// the seed table, the rowlift processes and their CPU, and the machine description
// stored with every result.
package benchkit
