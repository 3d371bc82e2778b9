// Command slurmscope-datasource is the backend of the slurmscope Grafana
// datasource. Grafana starts it and talks to it over the plugin gRPC
// protocol; it is not run by hand.
package main

import (
	"os"

	"github.com/grafana/grafana-plugin-sdk-go/backend/datasource"
	"github.com/grafana/grafana-plugin-sdk-go/backend/log"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/plugin"
)

func main() {
	if err := datasource.Manage(plugin.ID, plugin.NewDatasource, datasource.ManageOpts{}); err != nil {
		log.DefaultLogger.Error(err.Error())
		os.Exit(1)
	}
}
